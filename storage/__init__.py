"""The storage API's services: buckets, objects and their bytes, signed URLs, image renditions."""
