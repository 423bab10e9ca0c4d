"""Hosts reached over SSH through the SSH provider's :class:`SSHHook`.

Credentials (user, private key) come only from the Airflow ``ssh``
connection; the address and port from the fleet (or the ``ssh_host_override``
/ ``ssh_port`` settings: a bastion, or the loopback sshd of the tests).

Host keys: trust on first use, pinned per run. EC2 instances are new for
every run, so no key can be known beforehand. The first connection to a host
records its key in the run's ``known_hosts`` file (state directory); every
later connection of the run, from any task, must present the same key or it
is refused before a command is sent. The connection may therefore say
``no_host_key_check: true`` (the hook's own check is replaced by this one).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shlex
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ..base import CommandResult, EnvironmentFailure, Host

log = logging.getLogger("brokerbench")

_lock = threading.Lock()


class SshHost(Host):
    """One instance; ``run`` uses the SSH provider's hook (paramiko underneath)."""

    def __init__(self, name: str, role: str, address: str, port: int | None, ssh_conn_id: str,
                 known_hosts: Path, key_alias: str | None = None, conn_timeout: int = 20,
                 use_sudo: bool = True):
        self.name = name
        self.role = role
        self.address = address
        self.port = port
        self.ssh_conn_id = ssh_conn_id
        self.known_hosts = known_hosts
        self.key_alias = key_alias or name  # tests map every instance to one sshd: key per instance name
        self.conn_timeout = conn_timeout
        self.use_sudo = use_sudo
        self._hook = None
        self._client = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "address": self.address, "port": self.port}

    # -- connection --------------------------------------------------------------
    def hook(self):
        if self._hook is None:
            # Airflow: loaded where this runs under Airflow, not on import
            from airflow.providers.ssh.hooks.ssh import SSHHook

            self._hook = SSHHook(ssh_conn_id=self.ssh_conn_id, remote_host=self.address, port=self.port,
                                 conn_timeout=self.conn_timeout, conn_retry_attempts=3)
        return self._hook

    def client(self):
        if self._client is None or not (self._client.get_transport() and self._client.get_transport().is_active()):
            try:
                client = self.hook().get_conn()
            except Exception as e:  # noqa: BLE001 - the message names the host
                raise EnvironmentFailure(f"SSH to {self.address}:{self.port or 22} failed: {e}", self.name) from e
            self._verify_host_key(client)
            self._client = client
        return self._client

    def _verify_host_key(self, client) -> None:
        key = client.get_transport().get_remote_server_key()
        seen = f"{key.get_name()} {key.get_base64()}"
        with _lock:
            known = json.loads(self.known_hosts.read_text()) if self.known_hosts.exists() else {}
            pinned = known.get(self.key_alias)
            if pinned is None:
                known[self.key_alias] = seen
                self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.known_hosts.with_suffix(".tmp")
                tmp.write_text(json.dumps(known, indent=2))
                tmp.replace(self.known_hosts)
                log.info("%s: host key %s pinned for this run (trust on first use)", self.name, key.get_name())
            elif pinned != seen:
                client.close()
                raise EnvironmentFailure(
                    f"host key changed since the run first connected ({key.get_name()}); refusing to "
                    f"send commands. Pinned keys: {self.known_hosts}", self.name)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- commands ---------------------------------------------------------------------
    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        try:
            rc, out, err = self.hook().exec_ssh_client_command(self.client(), f"bash -c {shlex.quote(command)}",
                                                               get_pty=False, environment=None, timeout=timeout)
            return CommandResult(self.name, command, rc, out.decode(errors="replace"),
                                 err.decode(errors="replace"))
        except EnvironmentFailure as e:
            return CommandResult(self.name, command, 255, "", str(e))
        except Exception as e:  # noqa: BLE001 - a timeout or a dropped connection is a result
            self.close()
            msg = str(e)
            return CommandResult(self.name, command, 124 if "timed out" in msg else 255, "", msg)

    def sudo(self, command: str, timeout: float = 60.0) -> CommandResult:
        """``command`` as root (``sudo -n`` unless already root)."""
        wrapped = f'if [ "$(id -u)" = 0 ]; then bash -c {shlex.quote(command)}; ' \
                  f'else sudo -n bash -c {shlex.quote(command)}; fi'
        return self.run(wrapped, timeout=timeout)

    def stream(self, command: str, on_line: Callable[[str], None], timeout: float, stdin: str | None = None) -> int:
        """Run ``command``, calling ``on_line`` for every output line as it arrives.
        Returns the exit status (124 when ``timeout`` passed; the command's
        session is closed then, which hangs up its processes). ``stdin``: sent to
        the command's standard input, which is then closed (never a file, never the
        command line)."""
        transport = self.client().get_transport()
        chan = transport.open_session()
        chan.set_combine_stderr(True)
        chan.exec_command(f"bash -c {shlex.quote(command)}")
        if stdin is not None:
            chan.sendall(stdin.encode())
            chan.shutdown_write()
        deadline = time.monotonic() + timeout
        buf = b""
        while True:
            if chan.recv_ready():
                buf += chan.recv(65536)
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    on_line(line.decode(errors="replace"))
                continue
            if chan.exit_status_ready() and not chan.recv_ready():
                break
            if time.monotonic() > deadline:
                chan.close()
                return 124
            time.sleep(0.05)
        if buf:
            on_line(buf.decode(errors="replace"))
        return chan.recv_exit_status()

    @contextlib.contextmanager
    def _sftp(self, remote_parent: str | None = None):
        """An SFTP session on this host's connection, closed afterwards; creates ``remote_parent``."""
        sftp = self.client().open_sftp()
        try:
            if remote_parent:
                self._mkdirs(sftp, remote_parent)
            yield sftp
        finally:
            sftp.close()

    def put_text(self, text: str, remote: str, mode: int = 0o644) -> None:
        with self._sftp(os.path.dirname(remote)) as sftp:
            with sftp.open(remote, "w") as f:
                f.write(text)
            sftp.chmod(remote, mode)

    def put_file(self, local: str, remote: str) -> None:
        with self._sftp(os.path.dirname(remote)) as sftp:
            sftp.put(local, remote)

    def get_file(self, remote: str, local: str) -> bool:
        """Copy ``remote`` to ``local``; False when the remote file does not exist."""
        with self._sftp() as sftp:
            try:
                sftp.stat(remote)
            except FileNotFoundError:
                return False
            Path(local).parent.mkdir(parents=True, exist_ok=True)
            sftp.get(remote, local)
            return True

    @staticmethod
    def _mkdirs(sftp, path: str) -> None:
        parts, cur = [p for p in path.split("/") if p], ""
        for p in parts:
            cur += "/" + p
            try:
                sftp.stat(cur)
            except FileNotFoundError:
                try:
                    sftp.mkdir(cur)
                except OSError:
                    # another session made it in between (hosts that share a file system set up at once)
                    sftp.stat(cur)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
