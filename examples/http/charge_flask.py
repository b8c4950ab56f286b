"""The charge endpoint as a framework service: Flask, SQLAlchemy 2.0's ORM, PostgreSQL.

POST /charges with {"amount": N} and an Idempotency-Key header makes a charge: a row with a
`uuid4()` id SQLAlchemy fills in and a `created_at` PostgreSQL fills in (`server_default
now()`), and the key's saved response (its request's hash, status and body) as a row of
its own. A retry with the key is answered from the saved response; the key reused with
another body is refused (422). The schema is made at start-up (`metadata.create_all`), as
services do; SQLAlchemy's pool holds the connections; Werkzeug serves a thread a request.
Three crash points: after the lookup, before the commit, after the commit.

VARIANT chooses the handler:
- `correct` (the default): the key is the saved response's primary key. The lookup, the
  charge and the key in one session's transaction; a retry beside its original waits on
  the original's uncommitted key at its insert, then fails on it (IntegrityError), rolls its
  own charge back and answers the saved response.
- `split`: the charge committed, then the key saved in a second transaction (a crash between
  them, and the retry charges again).
- `racy`: no unique constraint on the key (a surrogate id is the primary key): two attempts
  in flight both miss the key and both charge.
"""

import hashlib
import json
import os
import sys
import uuid
from datetime import datetime

from flask import Flask, jsonify, request
from sqlalchemy import DateTime, Integer, String, create_engine, func, select
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from werkzeug.serving import make_server

# The helper last among the imports: a warm spare is held here, the framework loaded.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "helpers"))
from retrysim_points import point  # noqa: E402

VARIANT = os.environ.get("VARIANT", "correct")


class Base(DeclarativeBase):
    pass


class Charge(Base):
    __tablename__ = "charges"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    amount: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"
    if VARIANT == "racy":
        row_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
        key: Mapped[str] = mapped_column(String)
    else:
        key: Mapped[str] = mapped_column(String, primary_key=True)
    request_hash: Mapped[str] = mapped_column(String)
    status: Mapped[int] = mapped_column(Integer)
    response = mapped_column(JSONB)


# DATABASE_URL names the driver for SQLAlchemy (url_scheme = "postgresql+psycopg" in the
# scenario): 2.0 takes a bare postgresql:// for psycopg2.
ENGINE = create_engine(os.environ["DATABASE_URL"], pool_size=4)
app = Flask(__name__)


def saved_answer(session, key, request_hash):
    saved = session.scalars(select(IdempotencyKey).where(IdempotencyKey.key == key)).first()
    if saved is None:
        return None
    if saved.request_hash != request_hash:
        return 422, {"error": "the Idempotency-Key was used with another request"}
    return saved.status, saved.response


def new_charge(session, amount):
    charge = Charge(amount=amount)
    session.add(charge)
    session.flush()
    return 201, {"id": str(charge.id), "amount": amount}


def save_key(session, key, request_hash, answer):
    status, body = answer
    session.add(IdempotencyKey(key=key, request_hash=request_hash, status=status, response=body))


def handle(key, request_hash, amount):
    with Session(ENGINE) as session:
        saved = saved_answer(session, key, request_hash)
        point("after-lookup")
        if saved is not None:
            return saved
        answer = new_charge(session, amount)
        if VARIANT == "split":
            session.commit()
            point("between-commits")
        save_key(session, key, request_hash, answer)
        point("before-commit")
        try:
            session.commit()
        except IntegrityError:
            # Another attempt with the key committed first: its charge stands, ours goes.
            session.rollback()
            return saved_answer(session, key, request_hash)
    point("after-commit")
    return answer


@app.post("/charges")
def create_charge():
    key = request.headers.get("Idempotency-Key")
    if not key:
        return jsonify(error="the Idempotency-Key header is required"), 400
    raw_body = request.get_data()
    try:
        amount = int(json.loads(raw_body)["amount"])
    except (ValueError, KeyError, TypeError):
        return jsonify(error='the body must be {"amount": N}'), 400
    request_hash = hashlib.sha256(raw_body).hexdigest()
    status, body = handle(key, request_hash, amount)
    return jsonify(body), status


def main():
    Base.metadata.create_all(ENGINE)
    server = make_server("127.0.0.1", int(os.environ["PORT"]), app, threaded=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
