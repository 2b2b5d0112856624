"""The Flask extension objects, created once and bound to an app in create_app."""

from flask import request
from flask_cors import CORS
from flask_limiter import Limiter
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass


def client_ip():
    # request.remote_addr is the proxy's X-Forwarded-For value only when TRUSTED_PROXIES says so
    return request.remote_addr or "unknown"


db = SQLAlchemy(model_class=Base)
migrate = Migrate(compare_type=True, render_as_batch=True)
limiter = Limiter(key_func=client_ip, headers_enabled=True, key_prefix="minibase")
cors = CORS()
