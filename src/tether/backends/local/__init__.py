"""The local backend: agents, conversations and their append-only transcripts under TETHER_HOME,
durable under kill -9 and a full disk, and one provider call per send.
"""
