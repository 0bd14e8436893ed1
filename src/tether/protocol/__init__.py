"""Data only: messages and their parts, stream chunks, the provider request, turn events and the
stream-json wire lines built from them.
"""
