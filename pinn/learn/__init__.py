"""Learning during a run: the oracles that label the frames a committee is unsure of (:mod:`pinn.learn.oracles`).

An oracle labels frames in pinn's QM/MM convention (docs/qmmm.md): the energy of the QM region in the field of
the MM charges (eV) and the forces on every atom (eV/Å), or for frames without an MM part the energy and forces of
the whole frame.  What it cannot label is set aside with the frame's index and the reason, never dropped silently.
"""
