"""Distributed measurement: an RPC tracker and two RPC servers on 127.0.0.1,
started exactly as users start them (``python -m tvm.exec.rpc_tracker`` / ``rpc_server``), and
a small model tuned through them with MetaSchedule's ``RPCRunner``."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from cases.foundation import ConvBiasReluSoftmax
from tvm import rpc

from tvm_fusion_ext import tuning
from tvm_fusion_ext.driver import evaluation

pytest.importorskip("tornado")  # the tracker needs it (dev extra)

HOST = "127.0.0.1"
KEY = "tvm-fusion-test"
SERVERS = 2
TRIALS = 2
START_TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


# One shell holds the tracker and the servers in its own process group; it starts the servers once
# the tracker listens (they retry a missing tracker only every 5 s) and, when its stdin closes (the
# fixture's teardown, or this process dying), kills the whole group: the servers' forked session
# processes and popen workers included, so nothing outlives the test.
FLEET_SCRIPT = """
"$PY" -m tvm.exec.rpc_tracker --host "$HOST" --port "$PORT" --port-end "$((PORT + 1))" > "$LOGS/tracker.log" 2>&1 &
until (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; do sleep 0.2; done
i=0
for server_port in $SERVER_PORTS; do
  "$PY" -m tvm.exec.rpc_server --host "$HOST" --port "$server_port" --port-end "$((server_port + 1))" \\
    --tracker "$HOST:$PORT" --key "$KEY" > "$LOGS/server$i.log" 2>&1 &
  i=$((i + 1))
done
read -r _
kill 0
"""


def _servers_registered(port: int) -> bool:
    try:
        return len(rpc.connect_tracker(HOST, port).summary()["server_info"]) == SERVERS
    except (OSError, RuntimeError):
        return False


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """``(tracker port, server log paths)`` of a tracker with ``SERVERS`` servers under ``KEY``."""
    logs = tmp_path_factory.mktemp("rpc_logs")
    port = _free_port()
    env = {**os.environ, "PY": sys.executable, "HOST": HOST, "PORT": str(port), "KEY": KEY,
           "SERVER_PORTS": " ".join(str(_free_port()) for _ in range(SERVERS)), "LOGS": str(logs)}
    shell = subprocess.Popen(["bash", "-c", FLEET_SCRIPT], stdin=subprocess.PIPE, env=env,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _servers_registered(port):
            if shell.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the RPC tracker and servers did not come up; logs in {logs}")
            time.sleep(0.5)
        yield port, [logs / f"server{i}.log" for i in range(SERVERS)]
    finally:
        shell.stdin.close()
        try:
            shell.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()


@pytest.mark.timeout(180)
def test_tune_through_two_rpc_servers(fleet, tmp_path):
    port, server_logs = fleet
    summary = rpc.connect_tracker(HOST, port).summary()
    assert [s["key"] for s in summary["server_info"]] == [f"server:{KEY}"] * SERVERS

    target = tuning.tuning_target(evaluation.parse_target("llvm"), 2)
    runner = tuning.rpc_runner(f"{HOST}:{port}", KEY)
    report = tuning.tune(ConvBiasReluSoftmax, "stock", target, TRIALS, str(tmp_path), runner=runner,
                         progress=False)
    records = report.database.get_all_tuning_records()
    assert report.measured == len(records) >= len(report.tasks) == 2
    run_secs = [float(s) for record in records for s in record.run_secs]
    assert all(0 < s < tuning.FAILED_SECS for s in run_secs), run_secs
    # every candidate was uploaded to and loaded by one of the servers, and both took part
    loads = [len(re.findall(r"load_module \S+candidate\.so", log.read_text())) for log in server_logs]
    assert sum(loads) == report.measured and all(n > 0 for n in loads), loads
    assert os.path.isfile(tmp_path / tuning.RECORD_FILE)


def test_unknown_key_and_unreachable_tracker_are_one_line_errors(fleet):
    port, _ = fleet
    with pytest.raises(ValueError, match="no RPC server is registered as 'other-key'"):
        tuning.rpc_runner(f"{HOST}:{port}", "other-key")
    with pytest.raises(ValueError, match="cannot reach the RPC tracker") as err:
        tuning.rpc_runner(f"{HOST}:{_free_port()}", KEY, session_timeout_s=2)
    assert "\n" not in str(err.value)
