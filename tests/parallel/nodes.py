"""Emulated cluster nodes for the multi-node tests: one network namespace per node, joined by a bridge.

Each node ``pinn-<tag>-n<i>`` has two interfaces, ``eth0`` (10.77.0.10+i, "data") and ``eth1``
(10.78.0.10+i, "management"), each on its own bridge in a switch namespace ``pinn-<tag>-sw``, and
nothing else: no route out of 10.77.0.0/24 and 10.78.0.0/24, so the tests' traffic stays between the
namespaces made here.  Processes started on a node (:meth:`Nodes.command`, or the launch agent
:attr:`Nodes.agent` that ``mpirun --mca plm_rsh_agent`` calls instead of ssh, or :attr:`Nodes.ssh_dir`'s
``ssh`` for horovodrun) run in its namespace with their own host name, IPC and mount namespaces
(``unshare --uts --ipc --mount``; the node's hosts file names every node), so MPI sees separate
hosts and cannot use shared memory between them; each node has its own scratch folder.  The file system
is shared, as a cluster's home or project file system is.

Needs root and ``ip``/``unshare``; :func:`can_make_nodes` says whether this machine allows it.
``Nodes.close`` kills what still runs in the namespaces and deletes them.
"""
import os
import shutil
import signal
import subprocess
import uuid

SUBNETS = {"eth0": "10.77.0", "eth1": "10.78.0"}


def can_make_nodes():
    """``None`` where namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "unshare"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    probe = f"pinn-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args, ns=None):
    subprocess.run(["ip"] + (["-n", ns] if ns else []) + list(args), check=True, capture_output=True, text=True)


class Nodes:
    """``n`` emulated nodes in ``workdir`` (their scratch folders and the launch agent go there)."""

    def __init__(self, n, workdir):
        self.tag = uuid.uuid4().hex[:4]
        self.switch = f"pinn-{self.tag}-sw"
        self.names = [f"pinn-{self.tag}-n{i}" for i in range(n)]
        self.workdir = str(workdir)
        self.scratch = {name: os.path.join(self.workdir, f"scratch-{name}") for name in self.names}
        try:
            self._build()
        except Exception:
            self.close()
            raise

    def address(self, i, interface="eth0"):
        """Node ``i``'s IPv4 address on ``interface``."""
        return f"{SUBNETS[interface]}.{10 + i}"

    def _build(self):
        _ip("netns", "add", self.switch)
        _ip("link", "set", "lo", "up", ns=self.switch)
        for interface in SUBNETS:
            _ip("link", "add", f"br-{interface}", "type", "bridge", ns=self.switch)
            _ip("link", "set", f"br-{interface}", "up", ns=self.switch)
        for i, name in enumerate(self.names):
            _ip("netns", "add", name)
            _ip("link", "set", "lo", "up", ns=name)
            for interface in SUBNETS:
                # the node's end is made inside the switch namespace, then moved: no interface of the
                # machine's own namespace is ever touched
                outer = f"v{i}{interface[-1]}-{self.tag}"
                _ip("link", "add", outer, "type", "veth", "peer", "name", interface, "netns", name, ns=self.switch)
                _ip("link", "set", outer, "master", f"br-{interface}", ns=self.switch)
                _ip("link", "set", outer, "up", ns=self.switch)
                _ip("addr", "add", f"{self.address(i, interface)}/24", "dev", interface, ns=name)
                _ip("link", "set", interface, "up", ns=name)
            os.makedirs(self.scratch[name], exist_ok=True)
        # host names resolve on the nodes (Gloo looks its own up): the agent mounts /etc/netns/NODE/hosts over
        # /etc/hosts for what it runs (as ip netns exec does)
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self.address(i)} {name}\n" for i, name in enumerate(self.names))
        for name in self.names:
            os.makedirs(f"/etc/netns/{name}", exist_ok=True)
            with open(f"/etc/netns/{name}/hosts", "w") as f:
                f.write(hosts)
        #: the node-local scratch folder: one path, each node's own folder mounted on it (as $TMPDIR on a cluster)
        self.local = os.path.join(self.workdir, "node-local")
        os.makedirs(self.local, exist_ok=True)
        self.agent = os.path.join(self.workdir, "node-agent")
        cases = "\n".join(f"  {self.address(i)}|{self.address(i, 'eth1')}|{name}) node={name} ;;"
                          for i, name in enumerate(self.names))
        with open(self.agent, "w") as f:
            f.write(f"""#!/bin/sh
# a launch agent in place of ssh (mpirun --mca plm_rsh_agent): run the command on the emulated node
host=$1; shift
case "$host" in
{cases}
  *) echo "node-agent: no node $host" >&2; exit 255 ;;
esac
# the node's network; its own host name, IPC and mounts (its hosts file over /etc/hosts; /sys as it is, so
# that slurmd finds the cgroups, which ip netns exec would hide behind a fresh sysfs)
exec nsenter --net=/run/netns/"$node" unshare --uts --ipc --mount bash -c \
  "mount --bind /etc/netns/$node/hosts /etc/hosts; mount --bind {self.workdir}/scratch-$node {self.local}; \
   hostname $node; export PINN_NODE_SCRATCH={self.local}; $*"
""")
        os.chmod(self.agent, 0o755)
        #: a folder with ``ssh`` in it, the agent under ssh's name and arguments, for horovodrun (put it first on PATH)
        self.ssh_dir = os.path.join(self.workdir, "ssh-shim")
        os.makedirs(self.ssh_dir, exist_ok=True)
        with open(os.path.join(self.ssh_dir, "ssh"), "w") as f:
            f.write(f"""#!/bin/sh
# ssh's calling convention (horovodrun: ssh -o K=V ... HOST [-p P] [-i F] [-o K=V] COMMAND) onto the node agent
while [ "${{1#-}}" != "$1" ]; do shift 2; done
host=$1; shift
while [ "$1" = -p ] || [ "$1" = -i ] || [ "$1" = -o ]; do shift 2; done
exec {self.agent} "$host" "$*"
""")
        os.chmod(os.path.join(self.ssh_dir, "ssh"), 0o755)

    def command(self, i, argv):
        """``argv`` to run on node ``i`` (its namespace, host name and scratch folder)."""
        return [self.agent, self.address(i), " ".join(_quote(a) for a in argv)]

    def bytes_sent(self, i, interface):
        """Bytes node ``i`` has sent on ``interface`` so far."""
        out = subprocess.run(["ip", "netns", "exec", self.names[i], "cat",
                              f"/sys/class/net/{interface}/statistics/tx_bytes"], capture_output=True, text=True)
        return int(out.stdout)

    def cut_off(self, i):
        """Node ``i``'s interfaces down: from the others' side the node is lost (nothing more arrives, no
        connection is reset); its processes run on, alone."""
        for interface in SUBNETS:
            subprocess.run(["ip", "-n", self.names[i], "link", "set", interface, "down"], capture_output=True)

    def revive_node(self, i):
        """Node ``i``'s interfaces up again (a fresh node of the next allocation, at the same address)."""
        for interface in SUBNETS:
            _ip("link", "set", interface, "up", ns=self.names[i])

    @staticmethod
    def _kill(name):
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self):
        """Stop everything still running on the nodes and delete the namespaces (and with them the links)."""
        for name in getattr(self, "names", []) + [getattr(self, "switch", None)]:
            if name is None:
                continue
            self._kill(name)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def _quote(text):
    """``text`` quoted for sh."""
    return "'" + str(text).replace("'", "'\\''") + "'"
