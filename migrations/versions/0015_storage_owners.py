"""Storage objects and resumable uploads by owner: a user deleted, or made again under an id that
was given out before, leaves the objects of the id's earlier holder to nobody (their owner made
NULL), found by this index rather than by reading every object.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade():
    op.create_index("ix_minibase_storage_objects_owner", "minibase_storage_objects", ["owner"])
    op.create_index("ix_minibase_storage_uploads_owner", "minibase_storage_uploads", ["owner"])


def downgrade():
    op.drop_index("ix_minibase_storage_uploads_owner", "minibase_storage_uploads")
    op.drop_index("ix_minibase_storage_objects_owner", "minibase_storage_objects")
