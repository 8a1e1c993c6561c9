"""What a run produced: the worker's Measurement, the result.json built from it, and its files.

measurement.py is the hand-off from the ranks; build.py turns it into the document; schema.py
holds the document's fixed shape; storage.py says where its files go and writes them safely.
"""
