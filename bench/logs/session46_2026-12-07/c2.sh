# call 2 (tree ce9fa75): call 1's script again (c1.sh), after the fixes (the host-memory tests ask past any address space; oom_probe.py finds the package); an H100 came
bash _run/c1.sh
