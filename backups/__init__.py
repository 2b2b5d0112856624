"""Backups (docs/operations.md): one archive of a consistent moment of the database and the storage's
objects, to a folder or an S3 bucket, and restoring one into an empty service.

- make.py: create an archive (snapshot, then exactly the bytes its rows name), list, prune.
- restore.py: verify an archive whole, then restore it into an empty database and storage.
- archive.py: the zip file, its manifest and checksums.
- sqlite.py, mysql.py: the database's snapshot and restore, per kind.
- places.py: where archives are kept: a folder or s3://BUCKET/PREFIX."""
