"""tableservice: an asynchronous table-services daemon for Apache Hudi tables."""

__version__ = "0.1.0"
