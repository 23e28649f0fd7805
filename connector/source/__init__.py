"""The streaming source: Pub/Sub -> receiver -> sealed batches -> Spark (see ``datasource.py``)."""
