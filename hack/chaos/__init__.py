"""Fault runs on the local control plane: kohort's processes (`stack`), what must hold
(`invariants`), and seeded runs with one fault each (`runner`); `bench/chaos.py` drives them."""
