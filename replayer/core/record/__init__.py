"""``replayer record``: a proxy between an agent and llama-server that logs every request as sent.

``traffic_log`` holds what one logged exchange is (the line format, the thread guess, the
facts taken from a response); ``proxy`` is the asyncio + h11 server that forwards bytes
unchanged and writes those lines.
"""
