"""How a rank exchanges with the others: ``sync`` (averaging on a background thread), ``quantize``
(wire formats), ``robust`` (screening and robust averages), ``sparse`` and ``transform`` (top-k
payloads, a DCT per chunk), ``gathering`` and ``object_store`` (how top-k payloads travel: around the
ring, straight from the round's peers, or through a store), and ``comm`` and ``group`` (the collective
interface: torch, the store, or threads). It imports from ``core`` only its clock, kill points and
memory helpers.
"""
