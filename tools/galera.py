"""A throwaway MariaDB Galera cluster and a Redis server on 127.0.0.1, for the cluster tests and the
cluster benchmark: each server is a process of ours, started and stopped by its PID.

The cluster is made without any state transfer: node 1 is bootstrapped alone, stopped cleanly, and
its data directory copied to the others, so that all three start from one state and join at once.
A node killed with SIGKILL is started again the same way a real operator would: `--wsrep-recover`
finds the last position it committed, which goes into grastate.dat, and it rejoins by incremental
transfer (IST) from the others."""

import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pymysql

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
NAME = "minibase_test"


def find(program):
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin")


def installed():
    """Whether this machine can run a cluster: galera-4, mariadbd and redis-server."""
    return PROVIDER.exists() and all(find(p) for p in ("mariadbd", "mariadb-install-db", "redis-server"))


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, seconds, what):
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except (pymysql.err.Error, OSError):  # not answering yet: look again
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {seconds} s")
        time.sleep(0.1)


class Node:
    def __init__(self, cluster, number):
        self.cluster = cluster
        self.number = number
        self.dir = cluster.dir / f"node{number}"
        self.port, self.gcomm, self.ist, self.sst = (free_port() for _ in range(4))
        self.process = None

    @property
    def data(self):
        return self.dir / "data"

    def arguments(self, *extra):
        cluster = self.cluster
        options = [
            f"gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm}",
            f"ist.recv_addr=127.0.0.1:{self.ist}",
            "gcache.size=64M",
            # A node that stops answering is evicted after these: the others stall commits until then.
            "evs.keepalive_period=PT0.5S",
            f"evs.suspect_timeout=PT{cluster.suspect_seconds}S",
            f"evs.inactive_timeout=PT{cluster.suspect_seconds * 2}S",
            "evs.install_timeout=PT3S",
            "pc.wait_prim_timeout=PT5S",
        ]
        return [
            find("mariadbd"), "--no-defaults", "--user=root", f"--datadir={self.data}",
            f"--socket={self.dir}/sock", f"--port={self.port}", "--bind-address=127.0.0.1",
            f"--pid-file={self.dir}/pid", f"--log-error={self.dir}/err.log",
            "--innodb-log-file-size=8M", "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=0", "--lock-wait-timeout=5",
            "--innodb-lock-wait-timeout=5", "--max-connections=300",
            "--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
            "--wsrep-on=ON", f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-address=gcomm://{cluster.addresses()}",
            f"--wsrep-node-address=127.0.0.1:{self.gcomm}",
            f"--wsrep-sst-receive-address=127.0.0.1:{self.sst}",
            f"--wsrep-provider-options={';'.join(options)}",
            f"--wsrep-cluster-name={NAME}", "--wsrep-slave-threads=2",
            *extra,
        ]  # fmt: skip

    def start(self, *extra):
        self.process = subprocess.Popen(
            self.arguments(*extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def connect(self, database=None, **kwargs):
        return pymysql.connect(
            host="127.0.0.1", port=self.port, user="root", database=database, autocommit=True, **kwargs
        )

    def query(self, sql, database=None):
        connection = self.connect(database, connect_timeout=5, read_timeout=30)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql)
                return cursor.fetchall()
        finally:
            connection.close()

    def status(self, name):
        rows = self.query(f"SHOW STATUS LIKE '{name}'")
        return rows[0][1] if rows else None

    def ready(self):
        """Whether the node is a synced member of a primary component of all the cluster's nodes
        that are running."""
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"galera node {self.number} exited: {self.log()[-3000:]}")
        running = sum(1 for node in self.cluster.nodes if node.running())
        return (
            self.status("wsrep_ready") == "ON"
            and self.status("wsrep_local_state_comment") == "Synced"
            and int(self.status("wsrep_cluster_size")) == running
        )

    def running(self):
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, seconds=60):
        try:
            wait_until(self.ready, seconds, f"galera node {self.number} synced")
        except RuntimeError as exc:  # the nodes' own words on why, before their folders are removed
            raise RuntimeError(f"{exc}\n{self.cluster.describe()}") from None

    def stop(self):
        """SIGTERM, and wait for a clean exit."""
        if self.running():
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self):
        """SIGKILL: the node dies mid-flight, as a crashed machine would."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def recover(self):
        """After a SIGKILL: find the last committed position and write it into grastate.dat, so that
        the node rejoins by IST instead of asking for a full state transfer."""
        subprocess.run(
            [*self.arguments("--wsrep-recover"), f"--log-error={self.dir}/recover.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False,
        )  # fmt: skip
        text = (self.dir / "recover.log").read_text()
        position = re.findall(r"Recovered position:?\s*([0-9a-f-]{36}):(-?\d+)", text)
        if not position:
            raise RuntimeError(f"galera node {self.number}: no recovered position: {text[-2000:]}")
        uuid, seqno = position[-1]
        state = self.data / "grastate.dat"
        text = state.read_text()
        text = re.sub(r"uuid:\s*\S+", f"uuid:    {uuid}", text)
        text = re.sub(r"seqno:\s*-?\d+", f"seqno:   {seqno}", text)
        text = re.sub(r"safe_to_bootstrap:\s*\d", "safe_to_bootstrap: 0", text)
        state.write_text(text)

    def restart(self):
        """Start a node that was killed, and wait until it has caught up."""
        self.recover()
        self.start()
        self.wait_ready(120)

    def log(self):
        path = self.dir / "err.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def describe(self):
        """The node's state, what its connections are running, and the end of its log (but the
        lines of clients that hung up, which drown the rest when it stalls): to tell why it does."""
        lines = [f"--- galera node {self.number}"]
        try:
            state = self.query("SHOW STATUS WHERE Variable_name IN ('wsrep_local_state_comment', "
                               "'wsrep_cluster_status', 'wsrep_cluster_size', 'wsrep_local_recv_queue', "
                               "'wsrep_flow_control_paused', 'wsrep_last_committed')")  # fmt: skip
            lines.append(", ".join(f"{name}={value}" for name, value in state))
            for row in self.query("SHOW FULL PROCESSLIST"):
                if row[4] != "Sleep" or "idle" not in str(row[6] or "idle"):  # Command, State
                    lines.append(f"  {row[4]} {row[5]} s, {row[6]}: {str(row[7])[:300]}")
        except (pymysql.err.Error, OSError) as exc:
            lines.append(f"not answering: {exc!r}")
        log = [line for line in self.log().splitlines() if "Aborted connection" not in line]
        return "\n".join([*lines, "its log ends:", *log[-40:]])


class Cluster:
    """`size` Galera nodes on 127.0.0.1; `url(i, database)` is node i's SQLAlchemy URL."""

    def __init__(self, size=3, suspect_seconds=2):
        self.dir = Path(tempfile.mkdtemp(prefix="minibase-galera-"))
        self.suspect_seconds = suspect_seconds
        self.nodes = [Node(self, number) for number in range(1, size + 1)]

    def addresses(self):
        return ",".join(f"127.0.0.1:{node.gcomm}" for node in self.nodes)

    def start(self):
        # Every directory open to all: even an IST rejoin runs the SST script, whose rsync daemon
        # drops to `nobody`.
        self.dir.chmod(0o777)
        first = self.nodes[0]
        first.dir.mkdir()
        subprocess.run(
            [find("mariadb-install-db"), "--no-defaults", "--user=root", f"--datadir={first.data}",
             f"--tmpdir={first.dir}", "--auth-root-authentication-method=normal", "--skip-test-db",
             "--innodb-log-file-size=8M"],
            check=True, capture_output=True,
        )  # fmt: skip
        first.start("--wsrep-new-cluster")
        first.wait_ready()
        first.stop()  # a clean stop: grastate.dat holds its position, safe to bootstrap from
        for node in self.nodes[1:]:
            shutil.copytree(first.dir, node.dir, symlinks=True)
            for stale in ("gvwstate.dat", "pid", "sock", "err.log"):
                (node.data / stale).unlink(missing_ok=True)
                (node.dir / stale).unlink(missing_ok=True)
        for path in self.dir.rglob("*"):
            path.chmod(path.stat().st_mode | 0o777 if path.is_dir() else path.stat().st_mode | 0o666)
        first.start("--wsrep-new-cluster")
        first.wait_ready()
        # One joiner at a time, as Galera's own start-up guide has it: two at once each wait for
        # the other's state transfer, and on a busy machine one gave up on the primary view.
        for node in self.nodes[1:]:
            node.start()
            node.wait_ready()
        return self

    def describe(self):
        return "\n".join(node.describe() for node in self.nodes if node.running())

    def url(self, index, database):
        return f"mysql+pymysql://root@127.0.0.1:{self.nodes[index].port}/{database}?charset=utf8mb4"

    def stop(self):
        for node in self.nodes:
            if node.running():
                node.process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    def __init__(self):
        self.port = free_port()
        self.process = subprocess.Popen(
            [find("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(self._answers, 10, "redis-server answering")
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def _answers(self):
        if self.process.poll() is not None:
            raise RuntimeError("redis-server exited")
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


if __name__ == "__main__":  # start one by hand: python tools/galera.py
    started = time.monotonic()
    cluster = Cluster().start()
    print(f"cluster up in {time.monotonic() - started:.1f} s:", [n.port for n in cluster.nodes], flush=True)
    try:
        signal.pause()
    finally:
        cluster.stop()
