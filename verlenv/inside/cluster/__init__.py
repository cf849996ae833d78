"""`verlenv doctor --cluster`: doctor on every node of a Ray cluster, and what differs between them.

gather (Ray: one pinned task per node) -> nodefacts (what each node reports) -> compare (cross-node
verdicts) -> render (a table with one column per node, or JSON); collective is the all-reduce
smoke through Ray. netsel (which interface and address Ray, NCCL and Gloo use) and rdma (the
RDMA userspace) need only the standard library; only gather and collective import Ray, and
only when they run.
"""
