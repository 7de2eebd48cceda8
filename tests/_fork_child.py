"""A child for the fork server's tests (``python -m _fork_child ACTION``): writes its pid, arguments, working
folder and ``FORK_TEST`` variable as one JSON line to stdout, echoes a line of stdin to stderr, then by ``ACTION``:
a number exits with that code; ``wait`` waits for a signal; ``trap`` waits for SIGTERM, says so on stderr and
exits 43; ``die`` kills itself with SIGUSR1."""

import json
import os
import signal
import sys


def _trapped(_number: int, _frame: object) -> None:
    sys.stderr.write("term\n")
    sys.stderr.flush()
    os._exit(43)


print(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "cwd": os.getcwd(), "var": os.environ.get("FORK_TEST"),
                  "name": __name__}), flush=True)
action = sys.argv[1]
if action == "trap":
    signal.signal(signal.SIGTERM, _trapped)
    print("trapped", flush=True)
sys.stderr.write(f"echo:{sys.stdin.readline()}")
sys.stderr.flush()
if action in ("wait", "trap"):
    while True:
        signal.pause()
if action == "die":
    os.kill(os.getpid(), signal.SIGUSR1)
sys.exit(int(action))
