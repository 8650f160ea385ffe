"""Executors run the heavy work of table services. The Spark executor is the only one; it uses the DataFrame API
alone (no SparkContext, no RDDs) so that the same jobs run on Spark Connect."""
