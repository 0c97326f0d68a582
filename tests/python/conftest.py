"""Set before any test imports torch, and inherited by pytest-xdist's workers
and every keel process a test starts: OpenMP threads wait passively.

pytest -n 2 runs two workers that each size their OpenMP teams to all the
cores; libgomp's default spin-wait then burns the time slices the other worker
needs (the GPU check's CPU rehearsal took 100 s instead of 36). Results do not
change, only how an idle thread waits. tests/CMakeLists.txt sets the same for
CTest; docs/building.md has the measurements."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
