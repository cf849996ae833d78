"""`verlenv doctor --cluster`: doctor on every node of a Ray cluster, and what differs between them.

session (one run) -> gather (Ray: one pinned task per node, each running `verlenv doctor --json
--node-facts` there) -> nodefacts (what each node reports) -> compare (cross-node verdicts) ->
render (a table with one column per node, or JSON); collective is the all-reduce smoke through
Ray. netsel (which interface and address Ray, NCCL and Gloo use), rdma (the RDMA userspace) and
nccllib (the libnccl loaded) need only the standard library and serve plain `verlenv doctor` too;
only gather and collective import Ray, and only when they run.
"""
