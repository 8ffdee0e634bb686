# Sourced by make_fixtures.sh and make_energy_fixtures.sh: writes topol.top (a Na+ Cl- pair in flexible
# TIP3P water, AMBER03) and ions.gro (the pair) into the current directory.
cat > topol.top <<'TOP'
#define FLEXIBLE
#include "amber03.ff/forcefield.itp"
#include "amber03.ff/tip3p.itp"
#include "amber03.ff/ions.itp"

[ system ]
NaCl in water

[ molecules ]
NA 1
CL 1
TOP
printf 'NaCl\n    2\n%5d%-5s%5s%5d%8.3f%8.3f%8.3f\n%5d%-5s%5s%5d%8.3f%8.3f%8.3f\n   1.00000   1.00000   1.00000\n' \
  1 NA NA 1 0.0 0.0 0.0  2 CL CL 2 0.35 0.0 0.0 > ions.gro
