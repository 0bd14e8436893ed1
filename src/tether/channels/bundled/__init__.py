"""The channels tether ships: telegram, slack (Socket Mode) and a generic webhook."""
