"""A child for the fork server's tests (``python -m _fork_child ACTION``): writes its pid, arguments, working
folder and ``FORK_TEST`` variable as one JSON line to stdout, echoes a line of stdin to stderr, then exits with
the code ``ACTION`` names, or waits for a signal (``wait``)."""

import json
import os
import signal
import sys

print(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "cwd": os.getcwd(), "var": os.environ.get("FORK_TEST"),
                  "name": __name__}), flush=True)
sys.stderr.write(f"echo:{sys.stdin.readline()}")
sys.stderr.flush()
if sys.argv[1] == "wait":
    signal.pause()
sys.exit(int(sys.argv[1]))
