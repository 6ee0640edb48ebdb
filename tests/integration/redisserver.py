"""A private redis-server for the tests that use the Redis session store: started on a free
loopback port with its files in a folder of the test's own, killed (-9) or stopped, and
restarted on the same port and files. Shared by the integration suite (the store, idempotent
retries) and the deployment suite (replicas behind nginx); both put this directory on sys.path."""
import os
import shutil
import socket
import subprocess

import xlharness as X

REDIS = shutil.which("redis-server")
NOT_INSTALLED = "redis-server is not installed (tools/install-deps.sh test installs it)"
AOF_ALWAYS = ("--appendonly", "yes", "--appendfsync", "always")


def redis_command(port, *args):
    """One RESP command to redis-server; the reply's first line (bulk: its value), decoded."""
    req = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(req)
        lines = s.recv(65536).split(b"\r\n")
    if lines[0].startswith(b"$") and lines[0] != b"$-1":
        return lines[1].decode()
    return lines[0].decode()


class RedisServer:
    """redis-server on 127.0.0.1 with its files (and log) in DIR; `persistence` are its
    persistence flags (default: the AOF with appendfsync always). Started at construction;
    restartable on the same port and files after kill9() or stop()."""

    def __init__(self, d, persistence=AOF_ALWAYS):
        self.persistence = list(persistence)
        self.dir = str(d)
        os.makedirs(self.dir, exist_ok=True)
        self.port = X.free_port()
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
             *self.persistence, "--save", "",
             "--daemonize", "no", "--logfile", os.path.join(self.dir, "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        X.wait_until(self.ping, 20, "redis-server answers PING")

    def ping(self):
        try:
            return self.command("PING") == "+PONG"
        except OSError:
            return False

    def command(self, *args):
        """One command (RESP); the reply's first line (bulk: its value), decoded."""
        return redis_command(self.port, *args)

    def kill9(self):
        """SIGKILL: what the AOF holds is all that survives."""
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
