"""The WSGI entry point: shared hosting imports `app` from here; `python wsgi.py` serves it with waitress."""

import logging

from app import create_app

app = create_app()

if __name__ == "__main__":
    from waitress import serve

    import tokens

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    secret = app.config["JWT_SECRET"]
    print(f"anon key:         {tokens.api_key('anon', secret)}")
    print(f"service_role key: {tokens.api_key('service_role', secret)}")
    print(f"serving on http://{app.config['HOST']}:{app.config['PORT']}", flush=True)
    serve(app, host=app.config["HOST"], port=app.config["PORT"], threads=app.config["THREADS"])
