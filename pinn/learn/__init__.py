"""Learning during ML/MM MD (``pinn learn``, :mod:`pinn.learn.loop`): a committee explores
(:mod:`pinn.learn.explorer`), the frames it is unsure of are chosen (:mod:`pinn.learn.selection`) and labelled by
an oracle (:mod:`pinn.learn.oracles`), the committee is retrained; the run file: :mod:`pinn.learn.config`.

An oracle labels frames in pinn's QM/MM convention (docs/qmmm.md): the energy of the QM region in the field of
the MM charges (eV) and the forces on every atom (eV/Å), or for frames without an MM part the energy and forces of
the whole frame.  What it cannot label is set aside with the frame's index and the reason, never dropped silently.
"""
