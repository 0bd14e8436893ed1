"""Chat channels (reference §14): adapters for chat platforms, access control, routing and the
gateway that connects them to agents through the App Server."""
