"""The request as minibase's views read it: Flask's, plus how an upload's body arrives. Both servers
take one path: the body is received into a files.Spool (its md5 computed on the way) and the
upload takes that file as it is, neither copied nor read again.

- A raw body: uvicorn receives it into a Spool before the view runs and announces it in the environ
  (files.SPOOLED); under waitress, which has no such hook, `upload_stream` is the body's stream, read
  once, chunk by chunk, by the upload.
- A multipart form's files: `spool_form_files` has werkzeug's form parser write each into a Spool,
  through Request._get_file_stream, werkzeug's documented hook for where a file upload goes."""

import flask

from storage import files


class Request(flask.Request):
    form_spools = None  # the Spools of this request's form files, once spool_form_files asked
    spool_directory = None

    def upload_stream(self):
        """The raw body to store: the Spool the server received it into, or its stream."""
        return self.environ.get(files.SPOOLED) or self.stream

    def spool_form_files(self, directory):
        """Have the form's files parsed into Spools in `directory` (STORAGE_ROOT/.tmp): the list they
        are kept in, whose Spools the caller closes when the request ends (one no upload took)."""
        self.spool_directory, self.form_spools = directory, []
        return self.form_spools

    def _get_file_stream(self, total_content_length, content_type, filename=None, content_length=None):
        if self.form_spools is None:
            return super()._get_file_stream(total_content_length, content_type, filename, content_length)
        self.form_spools.append(files.Spool(self.spool_directory))
        return self.form_spools[-1]
