#!/usr/bin/env bash
# Regenerates the GROMACS energy fixtures of tests/io/test_mm_energies.py with real GROMACS (Debian: apt-get
# install gromacs): a Na+ Cl- pair in flexible TIP3P water (AMBER03, cubic box), 6 steps of 0.5 fs from step 10
# in double precision with the energies of every step.
#   nacl_energy.edr   gmx_d mdrun's energy file (read through pyedr)
#   nacl_energy.xvg   its Potential written by `gmx_d energy`
#
#   usage: make_energy_fixtures.sh [OUTDIR]      (default: this directory)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(cd "${1:-$here}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
export GMX_MAXBACKUP=-1
. "$here/nacl_system.sh"   # topol.top and ions.gro: the Na+ Cl- pair of both fixture scripts
gmx_d -quiet editconf -f ions.gro -o box.gro -bt cubic -d 0.6 >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
gmx_d -quiet solvate -cp box.gro -cs spc216.gro -p topol.top -o conf.gro >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
cat > md.mdp <<MDP
integrator = md
dt = 0.0005
init-step = 10
nsteps = 6
nstxout = 1
nstfout = 1
nstcalcenergy = 1
nstenergy = 1
cutoff-scheme = Verlet
coulombtype = reaction-field
rcoulomb = 0.5
rvdw = 0.5
constraints = none
MDP
gmx_d -quiet grompp -f md.mdp -c conf.gro -p topol.top -o md.tpr -maxwarn 2 >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
gmx_d -quiet mdrun -s md.tpr -deffnm md -nt 1 >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
echo Potential | gmx_d -quiet energy -f md.edr -o pot.xvg >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
cp md.edr "$out/nacl_energy.edr"
cp pot.xvg "$out/nacl_energy.xvg"
