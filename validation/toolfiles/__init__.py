"""Files users already have from their own hosts, for ``islands calibrate``: ``iperf3 -J``, nccl-tests'
tables and ``ping`` read (``readers``), and the network profile built from them (``hosts_profile``)."""
