"""Upstream PiNN 2.x's input files inputs/qm9-pinet.yml, md17-pinet2.yml, pinet2-dipole.yml and
pol_inputs/*.yml, restated as configuration data for the tests that run them as upstream's `pinn train` takes them."""

#: the optimizer section of upstream's input files (their learning rates differ)
UPSTREAM_ADAM = """\
optimizer:
  class_name: Adam
  config:
    global_clipnorm: 0.01
    learning_rate:
      class_name: ExponentialDecay
      config:
        decay_rate: 0.994
        decay_steps: 10000
        initial_learning_rate: {rate}
"""

QM9_PINET = """\
model:
  name: potential_model
  params:
    use_force: true
    e_loss_multiplier: 1.0
    f_loss_multiplier: 10.0
    e_scale: 1.0
    e_unit: 1.0
    use_e_per_atom: false
    log_e_per_atom: true
network:
  name: {network}
  params:
    depth: 5
    rc: 4.5
    n_basis: 10
    basis_type: gaussian
    pi_nodes: [64]
    pp_nodes: [64,64,64,64]
    ii_nodes: [64,64,64,64]
    out_nodes: [64]{extra}
{optimizer}"""
#: upstream's inputs/qm9-pinet.yml and inputs/md17-pinet2.yml (the same but PiNet2 with rank 3)
QM9_PINET_YML = QM9_PINET.format(network="PiNet", extra="", optimizer=UPSTREAM_ADAM.format(rate="0.0001"))
MD17_PINET2_YML = QM9_PINET.format(network="PiNet2", extra="\n    rank: 3",
                                   optimizer=UPSTREAM_ADAM.format(rate="0.0001"))
#: upstream's inputs/pinet2-dipole.yml
PINET2_DIPOLE_YML = """\
model:
  name: AC_dipole_model
  params:
    d_scale: 1.0
network:
  name: PiNet2
  params:
    depth: 5
    rc: 4.5
    n_basis: 10
    basis_type: gaussian
    pi_nodes: [64]
    pp_nodes: [64,64,64,64]
    ii_nodes: [64,64,64,64]
    out_nodes: [64]
    weighted: False
    atom_types: [1, 6, 7, 8, 9]
    rank: 3
""" + UPSTREAM_ADAM.format(rate="0.0001")


#: upstream's inputs/pol_inputs/acks2.yml (c1cfd5c); its nine other files differ only in the model name and
#: PiNet2's out_extra (those of NETWORK_EXTRAS)
UPSTREAM_POL_YML = """
model:
  name: pol_acks2_model
  params: {}
model_dir: model
network:
  name: PiNet2
  params:
    atom_types: [1, 6, 7, 8, 16, 17]
    basis_type: gaussian
    depth: 5
    ii_nodes: [32, 32, 32, 32]
    n_basis: 20
    out_extra: {i1: 1, i3: 1}
    out_nodes: [32]
    pi_nodes: [32]
    pp_nodes: [32, 32, 32, 32]
    rc: 4.5
""" + UPSTREAM_ADAM.format(rate="0.0003")
