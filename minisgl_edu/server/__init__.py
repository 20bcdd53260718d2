"""Chapters 1 and 9 — the processes of the server and the wires between them.

`queues` (ZMQ on ipc://), `tokenizer` (tokenizer and detokenizer worker), `scheduler_proc` (one
process per TP rank), `api` (FastAPI), `launcher` (start, ack, watch, stop), `shell` (a client
without HTTP). `python -m minisgl_edu.serve` puts them together.
"""
