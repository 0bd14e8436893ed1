"""The App Server: `tether server --listen ws://…`, protocol v2 over one websocket per client."""
