"""NCCL INFO lines between nodes as NCCL prints them with NCCL_DEBUG=INFO, for the ladder's
recorded-fact tests (doctor/readings/ladder.py); host names and addresses shortened. Sources:
NVIDIA/nccl issue #941 (a container without IB devices: "NET/IB : No device found." then
"Using network Socket"), Mellanox/nv_peer_memory issue #56 (NET/IB channels without GDRDMA,
"GPU Direct RDMA Disabled ... (distance 3 >= 2)"), NVIDIA/nccl-tests issue #185 (RoCE devices,
"Using network IB"), public NCCL log walkthroughs for "via NET/IB/2(3)/GDRDMA" and "NVLS
multicast support is not available on dev 0 (NVLS_NCHANNELS 0)"."""

SOCKETS_NO_DEVICE = """\
node0:7839:7911 [0] NCCL INFO Bootstrap : Using ens5f0np0:10.220.178.201<0>
node0:7839:7911 [0] NCCL INFO NET/IB : No device found.
node0:7839:7911 [0] NCCL INFO NET/Socket : Using [0]ens5f0np0:10.220.178.201<0> [1]bond0:10.220.178.201<0>
node0:7839:7911 [0] NCCL INFO Using network Socket
node0:7839:7911 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
"""

IB_WITHOUT_GDR = """\
master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>
master_node:11717:11986 [2] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)
master_node:11717:11986 [2] NCCL INFO Ring 00 : 6 -> 2 [receive] via NET/IB/0
master_node:11718:11985 [3] NCCL INFO Ring 01 : 3 -> 6 [send] via NET/IB/0
"""

ROCE_WITH_GDR = """\
dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>
dgxh100-4:460770:460842 [0] NCCL INFO Using network IB
dgxh100-4:460770:460842 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/2(3)/GDRDMA
dgxh100-4:460770:460842 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA
"""

IB_FOUND_BUT_SOCKETS = """\
gpu01:351578:352168 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eno1:10.0.0.1<0>
gpu01:351578:352168 [0] NCCL INFO Using network Socket
gpu01:351578:352168 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/1
"""

NVLS_UNAVAILABLE = "hostA:12345:12345 [0] NCCL INFO NVLS multicast support is not available on dev 0 (NVLS_NCHANNELS 0)\n"
