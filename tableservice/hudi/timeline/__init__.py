"""The timeline: instants, the active timeline, the archived timeline, failed writes."""
