"""Log texts of the rendezvous, the TCP store and the sockets between ranks (DDP2xx).

The socket errors are formatted by c10d as "(errno: N - text)" on Linux and macOS and as
"(system error: N - text)" on Windows (torch/csrc/distributed/c10d/error.h), where the text
is in the user's language ("通常每个套接字地址...只允许使用一次"): the number is the only stable
part, so every family is anchored on its numbers as well as on its English words.
    EADDRINUSE   Linux 98, macOS 48, Windows 10048
    EACCES       Linux/macOS 13 (a port below 1024), Windows 10013 (a reserved port)
    ETIMEDOUT    Linux 110, macOS 60, Windows 10060
    ECONNREFUSED Linux 111, macOS 61, Windows 10061
libuv (torch >= 2.3) writes "code: -98, name: EADDRINUSE, message: address already in use".
"""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Evidence, Pattern, Role
from ddp_doctor.model import Severity

_PORT_OF_BIND = (
    r"\bport: (\d+)",
    r":(\d+) \((?:errno|system error): \d+",
    r"bind to \S*?:(\d+)",
)
_CONNECT_TARGET = (
    r"connect to \(([^,\s)]+), \d+\)",
    r"connect to \[([^\]]+)\]:\d+",
    r"to host ([^\s:]+):\d+",
)
_CONNECT_PORT_REGEXES = (
    r"connect to \([^,\s)]+, (\d+)\)",
    r"connect to \[[^\]]+\]:(\d+)",
    r"to host [^\s:]+:(\d+)",
)


_BARRIER_FIELDS = {
    "joined": (r"worker_count=(\d+)", r"num_workers_joined=(\d+)"),
    "expected": (r"world_size=(\d+)",),
    "rank": (r"rank:? (\d+)",),
}


_CONNECT_FIELDS = {
    "master": (*_CONNECT_TARGET, r"server socket on \[([^\]]+)\]:\d+"),
    "port": (*_CONNECT_PORT_REGEXES, r"server socket on \[[^\]]+\]:(\d+)"),
    "timeout_ms": (
        r"timed out after (\d+)\s*ms",
        r"Original timeout was (\d+) ms",
        r"timeout=(\d+)ms",
    ),
    "timeout_s": (r"timed out after (\d+)s\b",),
}


def _more_joined_than_expected(evidence: Evidence) -> bool:
    joined, expected = evidence.get("joined"), evidence.get("expected")
    return isinstance(joined, int) and isinstance(expected, int) and joined > expected


def _not_more_joined(evidence: Evidence) -> bool:
    return not _more_joined_than_expected(evidence)


_PROCESS_GROUP_REFUSAL = (
    r"RuntimeError: Connection refused\s*$|pair\.cc|SO_ERROR|remote=\[|connect \[|"
    r"onnect to [\w.:%-]+<\d+>|Call to connect|NCCL|gloo|Gloo|c10d|socket\.cpp|"
    r"system error: 10061|\(errno: 61 - "
)

NETWORK_PATTERNS: tuple[Pattern, ...] = (
    # torch <= 1.8:  RuntimeError: Address already in use
    # 1.9 - 2.2:     [W socket.cpp:426] [c10d] The server socket has failed to bind to
    #                [::]:29500 (errno: 98 - Address already in use).  (pytorch/pytorch#85604)
    # >= 2.3:        DistNetworkError: The server socket has failed to listen on any local
    #                network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE,
    #                message: address already in use  (macOS: code -48; vllm-project/vllm#39015)
    # Windows:       The server socket has failed to bind to [DESKTOP-L9L2GVM]:10086 (system
    #                error: 10048 - 通常每个套接字地址(协议/网络地址/端口)只允许使用一次。)
    #                (YYuX-1145/Bert-VITS2-Integration-package#54)
    Pattern(
        "DDP201",
        "master-port-in-use",
        (
            "name: EADDRINUSE",
            "Address already in use",
            "address already in use",
            "(errno: 98 - ",
            "(errno: 48 - ",
            "system error: 10048",
        ),
        "the rendezvous port[ {port}] is already in use (EADDRINUSE): another job, or a stale "
        "one, listens on it",
        fields={"port": _PORT_OF_BIND},
        # other servers' binds: ZeroMQ's (vLLM's workers: vllm-project/vllm#7196,
        #   "ZMQError: Address already in use (addr='tcp://127.0.0.1:5570')") and uvicorn's
        #   ("error while attempting to bind on address ('0.0.0.0', 8000): address already in
        #   use", vllm-project/vllm#7514), not the rendezvous store's
        unless=("ZMQError", "error while attempting to bind on address"),
    ),
    # A port under 1024 needs root (Linux, macOS):
    # 2.x: The server socket has failed to bind to [::]:98 (errno: 13 - Permission denied).
    #      (KimMeen/Time-LLM#158)   libuv: code: -13, name: EACCES, message: permission denied
    # retyped: "Permission denied: The server socket has failed to bind to [::]:374"
    Pattern(
        "DDP230",
        "master-port-privileged",
        ("(errno: 13 - ", "name: EACCES", "Permission denied"),
        "binding the rendezvous port[ {port}] was refused (EACCES): a port below 1024 needs root",
        fields={"port": _PORT_OF_BIND},
        confirm=r"server socket|EACCES",
    ),
    # Windows refuses to bind ports in the ranges Hyper-V, WSL or Docker reserve with 10013
    # (WSAEACCES), in the user's language:  The server socket has failed to bind to
    # [kodachi]:51545 (system error: 10013 - ...)
    # (RVC-Project/Retrieval-based-Voice-Conversion-WebUI#246)
    Pattern(
        "DDP235",
        "master-port-reserved",
        ("system error: 10013",),
        "Windows refused the rendezvous port[ {port}] (error 10013): it lies in a range the "
        "system reserves, or another program holds it exclusively",
        fields={"port": _PORT_OF_BIND},
    ),
    # The client cannot reach the store: the connect itself timed out (a firewall dropping
    # packets, a wrong address, a master that is not up); told apart from "refused" (DDP206).
    # 1.10 - 2.x: [W socket.cpp:752] [c10d] The client socket has failed to connect to
    #             [::ffff:198.18.0.1]:3254 (errno: 110 - Connection timed out).
    #             (gensyn-ai/rl-swarm#197)
    # >= 2.3:     The server socket on [node-0]:29500 has timed out, will retry.
    # >= 2.0:     The client socket has timed out after 1800000ms while trying to connect to
    #             (10.200.0.1, 29500).   1.x: connect() timed out. Original timeout was N ms.
    # >= 2.4:     TCP client failed to connect/validate to host node-0:29500 - timed out
    #             (try=3, timeout=600000ms): ...
    # elastic:    RendezvousConnectionError: The connection to the C10d store has failed.
    # 1.9 - 1.10: RuntimeError: connect() timed out. (pytorch/ignite#2210, under TCPStore)
    # <= 1.6:     RuntimeError: Connection timed out (tcputil's connect(), strerror(ETIMEDOUT)
    #             bare on its line, under the TCPStore(...) frame; yangkky/distributed_tutorial#3)
    Pattern(
        "DDP231",
        "store-connect-timeout",
        (
            "socket has timed out after",
            "Original timeout was",
            "failed to connect/validate to host",
            "connection to the C10d store has failed",
            "connect() timed out",
            "RuntimeError: Connection timed out",
        ),
        "a rank could not connect to the rendezvous store[ at {master}][:{port}][ within "
        "{timeout_ms} ms]: the connection timed out (the address is unreachable, a firewall "
        "drops the packets, or nothing was listening there yet)",
        fields=_CONNECT_FIELDS,
        confirm=r"connect|C10d store|RuntimeError: Connection timed out\.?[\s|'\"`]*$",
        unless=("- retrying (try=",),  # torch retries; the final "- timed out (try=" counts
        priority=1,
    ),
    # The single attempts before it: retried, and harmless when a later one gets through.
    Pattern(
        "DDP231",
        "store-connect-timeout",
        ("(errno: 110 - ", "(errno: 60 - ", "system error: 10060", "has timed out, will retry"),
        "connecting to the rendezvous store[ at {master}][:{port}] timed out and was retried",
        fields=_CONNECT_FIELDS,
        confirm=r"connect|timed out, will retry",
        role=Role.NOTE,
        severity=Severity.WARNING,
    ),
    # master, >= 2.0: Timed out after 6 seconds waiting for clients. 1/2 clients joined.
    # 1.8 - 1.13:     Timed out initializing process group in store based barrier on rank: 0,
    #                 for key: store_based_barrier_key:1 (world_size=2, worker_count=1, ...)
    # >= 2.0:         ... on rank 0, for key: store_based_barrier_key:1 (world_size=2,
    #                 num_workers_joined=1, timeout=0:30:00 error=...)
    # torchrun c10d:  torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
    # A count above the world size is not a missing rank but too many processes (DDP207).
    Pattern(
        "DDP207",
        "world-size-mismatch",
        ("in store based barrier",),
        "{joined} processes joined a store barrier sized for a world of {expected}: more "
        "processes were started than the world size (two jobs on one master port, or a "
        "WORLD_SIZE smaller than the processes launched)",
        fields={
            "joined": (r"worker_count=(\d+)", r"num_workers_joined=(\d+)"),
            "expected": (r"world_size=(\d+)",),
            "rank": (r"on rank:? (\d+)",),
        },
        unless=("Waiting in store based barrier",),  # progress, read below
        accept=_more_joined_than_expected,
        priority=1,
    ),
    Pattern(
        "DDP202",
        "rendezvous-timeout",
        ("seconds waiting for clients", "in store based barrier", "RendezvousTimeoutError"),
        "a rank never joined the rendezvous[: {joined} of {expected} joined][ (rank {rank} "
        "waited)]",
        fields={
            "joined": (
                r"(\d+)/\d+ clients joined",
                r"worker_count=(\d+)",
                r"num_workers_joined=(\d+)",
            ),
            "expected": (r"\d+/(\d+) clients joined", r"world_size=(\d+)"),
        },
        unless=("Waiting in store based barrier",),
        accept=_not_more_joined,
        priority=1,
    ),
    # 2.x: [W socket.cpp:697] [c10d] The IPv4 network addresses of (node-7, 29500) cannot be
    #      retrieved (gai error: -2 - Name or service not known).  Python: socket.gaierror:
    #      [Errno -2] Name or service not known.  macOS: nodename nor servname provided.
    # The IPv6 variant alone is harmless noise on IPv4-only hosts, so it is left out.
    Pattern(
        "DDP203",
        "master-addr-unresolvable",
        (
            "Name or service not known",
            "nodename nor servname provided",
            "Temporary failure in name resolution",
            "No address associated with hostname",
            "getaddrinfo failed",  # Windows: socket.gaierror: [Errno 11001] getaddrinfo failed
        ),
        "a host name does not resolve[: {host}]",
        fields={"host": (r"addresses of \(([^,\s)]+),", r"\[([^\]\s]+)\]:\d+")},
        unless=("IPv6",),
    ),
    # NCCL: "NCCL WARN Bootstrap : no socket interface found" (NVIDIA/nccl#286)
    # gloo: "[enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83]
    #        ifa != nullptr. Unable to find address for: eth1"
    Pattern(
        "DDP205",
        "wrong-network-interface",
        # NCCL net_socket.cc (2.4 - 2.28): "NET/Socket : no interface found", "NET/Socket : No
        #   usable listening interface found" (NCCL_SOCKET_IFNAME matched nothing)
        (
            "no socket interface found",
            "Unable to find address for",
            "NET/Socket : no interface found",
            "No usable listening interface found",
        ),
        "no usable network interface[: gloo found no address on the interface {interface} "
        "(this host has no interface of that name, or it carries no IP address)]",
        fields={"interface": (r"Unable to find address for: (\S+)",)},
        # gloo's other lookup, of a host name's addresses (rp != nullptr), is DDP204's case:
        # factrules.py judges it (msr-fiddle/pipedream#32)
        unless=("rp != nullptr",),
    ),
    # gloo (lab notes): Gloo connectFullMesh failed with ... Connection refused,
    #                   remote=[127.0.0.1]:29400
    # NCCL: NCCL WARN socketStartConnect: Connect to 10.0.0.2<40321> failed : Connection refused
    # Windows: (system error: 10061 - ...)
    Pattern(
        "DDP206",
        "connection-refused",
        ("Connection refused", "system error: 10061", "(errno: 61 - "),
        "a connection between ranks was refused[ by {host}][:{port}]: a firewall, or nothing "
        "listening there",
        fields={
            "host": (r"remote=\[([^\]]+)\]", r"Connect to ([\w.:-]+)<\d+>"),
            "port": (r"remote=\[[^\]]+\]:(\d+)", r"Connect to [\w.:-]+<(\d+)>"),
        },
        # c10d retries with "[W socket.cpp] The client socket has failed to connect to
        # [node-0]:29500 (errno: 111 - Connection refused)" until the master is up: harmless
        unless=("client socket has failed to connect", "slurmstepd"),
        # slurmstepd's own RPCs after a cancel ("slurmstepd: error: Failed to send
        # MESSAGE_TASK_EXIT: Connection refused", facebookincubator/submitit#1708) are SLURM's
        # consequences of the cancel, never a connection of the job's
        # The refusal must be the process group's own: gloo's pair (connect [h]:p, SO_ERROR,
        # remote=[..]), NCCL's sockets (Connect to h<p>, Call to connect), torch 1.x's store
        # ("RuntimeError: Connection refused" alone), c10d; not a client of another service
        # (redis, gRPC under Ray, httpx, a JVM) whose refusal names no rendezvous
        confirm=_PROCESS_GROUP_REFUSAL,
    ),
    # ProcessGroupNCCL (all ranks but 0 fetch NCCL's unique id from the store, key '0', at the
    # first collective):
    # 1.x - 2.0: [3] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via
    #            c10d key-value store by key '0', but store->get('0') got error: Socket Timeout
    # >= 2.1:    "retrieving"; the error "wait timeout after 300000ms, keys: /default_pg/0//
    #            cuda//0" or "Connection reset by peer", then ". This may indicate a possible
    #            application crash on rank 0 or a network set up issue."
    # A timeout means rank 0 had not reached its first collective (huggingface/transformers
    # #15618: main_process_first tokenising on rank 0); a closed connection that it was gone.
    Pattern(
        "DDP234",
        "peer-exited-early",
        ("ncclUniqueId from [0]",),
        "rank {rank} asked the store for rank 0's NCCL id and the connection closed: the "
        "store's host (rank 0 or the launcher) had exited",
        fields={"rank": (r"\[(\d+)\] is setting up",), "key": (r"by key '([^']*)'",)},
        confirm=r"store->get\('[^']*'\) got error: .*(?:reset|[Cc]losed|Broken pipe|EOF|recv)",
        role=Role.SYMPTOM,
    ),
    Pattern(
        "DDP232",
        "rank0-work-outlasts-timeout",
        ("ncclUniqueId from [0]",),
        "rank {rank} waited for rank 0's NCCL id[ for {timeout_ms} ms] and gave up: rank 0 "
        "had not reached its first collective[: it was still busy with '{work}'][ ({elapsed} "
        "elapsed)]",
        fields={
            "rank": (r"\[(\d+)\] is setting up",),
            "key": (r"by key '([^']*)'",),
            "timeout_ms": (r"timeout after (\d+)\s*ms",),
        },
        role=Role.CAUSE,
    ),
    # >= 2.x TCPStore client: the store's host went away under a waiting rank
    #   Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server
    #   shutdown or crash?  (2.4 - 2.6, lowercase and alone: "[c10d] recvValue failed on
    #   SocketImpl(...): failed to recv, got 0 bytes"; pytorch/pytorch Utils.hpp recvBytes)
    Pattern(
        "DDP234",
        "peer-exited-early",
        ("Failed to recv, got 0 bytes", "failed to recv, got 0 bytes"),
        "the rendezvous store's host (rank 0 or the launcher) closed the connection: it had exited",
        role=Role.SYMPTOM,
    ),
    # A store wait elsewhere (a barrier in user code, a key another rank never set):
    #   DistStoreError: wait timeout after 1800000ms, keys: /default_pg/0//cuda//0
    # >= 2.3 socket.cpp, the client's side of the same wait:
    #   waitForInput: socket SocketImpl(fd=79, addr=[localhost]:41170, remote=[localhost]:
    #   29500) timed out after 1800000ms  (axolotl-ai-cloud/axolotl#2684)
    # 1.x (TCPStore.cpp / tcputils.cpp), with no numbers: "RuntimeError: Wait timeout",
    #   "RuntimeError: Socket Timeout" (a line that ends there: tinygrad's "Wait timeout:
    #   30000 ms!" is another program's)
    Pattern(
        "DDP202",
        "rendezvous-timeout",
        (
            "wait timeout after",
            "barrier timeout after",
            "SocketImpl(",
            "RuntimeError: Wait timeout",
            "Error: Socket Timeout",
        ),
        "a rank waited in the store[ for {timeout_ms} ms] for a key another rank never "
        "set[ ({keys})]",
        fields={
            "timeout_ms": (r"timeout after (\d+)\s*ms", r"timed out after (\d+)\s*ms"),
            "keys": (r"keys?: (\S+)",),
        },
        confirm=r"timeout after|waitForInput: socket .* timed out after|"
        r"(?:RuntimeError|DistStoreError): (?:Wait timeout|Socket Timeout)\s*$",
        role=Role.SYMPTOM,
    ),
    # 1.12 - 1.13 log at INFO, every 10 s, while ranks are missing from the barrier; a run where
    # the last rank arrives late then says "Completed store-based barrier" (inference.py drops
    # these then). Without the final error they are the only sign (wenet-e2e/wenet#1376).
    #   Waiting in store based barrier to initialize process group for rank: 5, key:
    #   store_based_barrier_key:1 (world_size=8, worker_count=7, timeout=0:30:00)
    Pattern(
        "DDP207",
        "world-size-mismatch",
        ("Waiting in store based barrier",),
        "{joined} processes joined a store barrier sized for a world of {expected}: more "
        "processes were started than the world size",
        fields=_BARRIER_FIELDS,
        accept=_more_joined_than_expected,
    ),
    Pattern(
        "DDP202",
        "rendezvous-timeout",
        ("Waiting in store based barrier",),
        "ranks waited in the store barrier for one that never came[: {joined} of {expected} "
        "joined]",
        fields=_BARRIER_FIELDS,
        accept=_not_more_joined,
    ),
)
