"""A tiny service for the live-profiling tests: ``python _service.py serve SECONDS`` serves
calls of a decorated function in a loop; ``python _service.py fork`` checks the channel of a
forked child. Prints "ready <pid>" once its control channel is open."""

from __future__ import annotations

import json
import os
import sys
import time

import torch

import neuronscope as ns
from neuronscope.capture import control

x = torch.randn(32, 32)


@ns.profile_neuron(name="serve", sample=0.0)
def serve(a):
    return (a @ a).relu()


def main() -> None:
    mode = sys.argv[1]
    if mode == "fork":
        # GNU OpenMP is not fork-safe: a matmul on the parent's OpenMP team leaves the child's
        # first matmul waiting on that team's barrier forever (seen on 2-core machines)
        torch.set_num_threads(1)
    serve(x)  # the first decorated call opens the channel
    if mode == "serve":
        print("ready", os.getpid(), control.current_path(), flush=True)
        end = time.monotonic() + float(sys.argv[2])
        while time.monotonic() < end:
            serve(x)
            time.sleep(0.005)
        return
    if mode == "fork":
        parent = control.current_path()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its own channel on its first call; removed when it exits
            os.close(r)
            serve(x)
            mine = control.current_path()
            reply = control.request(os.getpid(), {"op": "status"})
            os.write(w, json.dumps({"path": str(mine), "exists": mine is not None and mine.exists(), "pid": reply["pid"]}).encode())
            os.close(w)
            sys.exit(0)  # a normal exit: atexit removes the child's socket, not the parent's
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        child = json.loads(data)
        child["child_socket_left"] = os.path.exists(child["path"])
        child["parent"] = str(parent)
        child["parent_exists"] = parent.exists()
        child["child_pid"] = pid
        print(json.dumps(child), flush=True)


if __name__ == "__main__":
    main()
