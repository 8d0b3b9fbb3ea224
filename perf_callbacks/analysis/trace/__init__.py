"""Reading a trace: finding it, streaming its events in, and the device timeline with its intervals."""
