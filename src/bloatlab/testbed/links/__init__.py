"""Link backends: one interface (base.LinkBackend), chosen per link by the spec's `backend`
(testbed.network.LINK_BACKENDS); kernel.py builds tc qdiscs, userspace.py bloatlab-link."""
