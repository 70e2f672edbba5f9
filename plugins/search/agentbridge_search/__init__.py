"""Search agent: offline multi-hop QA benchmark, BM25/dense retrievers, Search-R1 retrieval server, QA rewards."""
