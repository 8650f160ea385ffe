"""Test helpers for the ZooKeeper lock: a real ZooKeeper server and a real Curator client (Debian packages)."""
