#!/usr/bin/env bash
# Regenerates the GROMACS-written .trr fixtures in this directory with real GROMACS
# (Debian: apt-get install gromacs, which ships gmx and gmx_d).  The tests compare
# pinn.io.readers.trr against MDAnalysis on these files, and tests/io/test_mimic_readers.py runs this
# script in a temporary directory when gmx is installed, so fresh files are checked too.
#
#   usage: make_fixtures.sh [OUTDIR]      (default: this directory)
#
# System: a Na+ Cl- pair in flexible TIP3P water (AMBER03), in a rhombic-dodecahedron
# (triclinic) box; 6 MD steps of 0.5 fs starting at step 10.
#   water_single_xvf.trr  gmx    x, v, f every step                        (single precision)
#   water_double_mixed.trr gmx_d x every 2 steps, f every 3, no v          (double precision)
#   water_single_mixed.trr gmx   x every 3 steps, v every 2, f every 2     (single precision)
#   water.mpt              the system's MiMiCPy topology (needs mimicpy==0.2.1 installed)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(cd "${1:-$here}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
export GMX_MAXBACKUP=-1
. "$here/nacl_system.sh"   # topol.top and ions.gro: the Na+ Cl- pair of both fixture scripts
gmx -quiet editconf -f ions.gro -o box.gro -bt dodecahedron -d 0.55 >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
gmx -quiet solvate -cp box.gro -cs spc216.gro -p topol.top -o conf.gro >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
run() {  # run NAME GMX NSTX NSTV NSTF
  cat > "$1.mdp" <<MDP
integrator = md
dt = 0.0005
init-step = 10
nsteps = 6
nstxout = $3
nstvout = $4
nstfout = $5
nstcalcenergy = 1
nstenergy = 0
cutoff-scheme = Verlet
coulombtype = reaction-field
rcoulomb = 0.5
rvdw = 0.5
gen-vel = yes
gen-temp = 300
gen-seed = 7
constraints = none
MDP
  "$2" -quiet grompp -f "$1.mdp" -c conf.gro -p topol.top -o "$1.tpr" -maxwarn 2 >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
  "$2" -quiet mdrun -s "$1.tpr" -deffnm "$1" -nt 1 >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
  cp "$1.trr" "$out/$1.trr"
}
run water_single_xvf gmx 1 1 1
run water_double_mixed gmx_d 2 0 3
run water_single_mixed gmx 3 2 2
# the matching MiMiCPy topology, when mimicpy 0.2.1 is installed (the tests' .mpt oracle)
if python -c 'import mimicpy' >/dev/null 2>&1; then
  GMXDATA="${GMXDATA:-/usr/share/gromacs}" python -c "from mimicpy import Mpt; Mpt.from_file('topol.top').write('$out/water.mpt')" \
    >>gmx.log 2>&1 || { tail -30 gmx.log >&2; exit 1; }
fi
echo "wrote $(ls "$out"/water_*.trr "$out"/water.mpt 2>/dev/null | tr '\n' ' ')"
