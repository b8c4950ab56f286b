"""An orders service as teams write it: FastAPI served by uvicorn, SQLAlchemy 2.0's ORM and
pool on PostgreSQL (psycopg 3), the schema made at start-up, a `uuid4()` id and a
`created_at` in each row. No crash point, no import of retrysim's: under retrysim its points
are the transactions PostgreSQL sees (the relay, `[database] points`).

POST /orders with {"item": "...", "quantity": N} and an Idempotency-Key header places an
order; a retry with the key is answered with the saved response, and the key reused with
another body is refused (422). FastAPI runs each (sync) request on a thread of its pool.

VARIANT chooses the handler:
- `lookup-first` (the default here, as first written): the key looked up in one
  transaction, then the order committed, then the key in a third; the key column has no
  unique constraint. Two attempts in flight both miss the key and both place the order; a
  crash between the order's commit and the key's does the same with one.
- `claim`: the key claimed first (`INSERT ... ON CONFLICT DO NOTHING`, the key the primary
  key) in the order's own transaction, the response saved in it too; an attempt that finds
  the key claimed answers what was saved (a racing one waits on the claim until it commits).
"""

import hashlib
import json
import os
import uuid
from datetime import datetime

import uvicorn
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import DateTime, Integer, String, create_engine, func, select
from sqlalchemy.dialects.postgresql import JSONB, UUID, insert
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

VARIANT = os.environ.get("VARIANT", "lookup-first")


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    item: Mapped[str] = mapped_column(String)
    quantity: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"
    if VARIANT == "claim":
        key: Mapped[str] = mapped_column(String, primary_key=True)
    else:
        id: Mapped[uuid.UUID] = mapped_column(
            UUID(as_uuid=True), primary_key=True, default=uuid.uuid4
        )
        key: Mapped[str] = mapped_column(String, index=True)
    request_hash: Mapped[str] = mapped_column(String)
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    response = mapped_column(JSONB, nullable=True)


def database_url():
    """DATABASE_URL as SQLAlchemy 2.0 takes it for psycopg 3."""
    return os.environ["DATABASE_URL"].replace("postgresql://", "postgresql+psycopg://", 1)


ENGINE = create_engine(database_url(), pool_size=4)
Base.metadata.create_all(ENGINE)
app = FastAPI()


def replay(saved, request_hash):
    if saved.request_hash != request_hash:
        return 422, {"error": "the Idempotency-Key was used with another request"}
    return saved.status, saved.response


def lookup_first(key, request_hash, item, quantity):
    with Session(ENGINE) as session:
        saved = session.scalars(select(IdempotencyKey).where(IdempotencyKey.key == key)).first()
        if saved is not None:
            return replay(saved, request_hash)
    with Session(ENGINE) as session, session.begin():
        order = Order(item=item, quantity=quantity)
        session.add(order)
        session.flush()
        body = {"id": str(order.id), "item": item, "quantity": quantity}
    with Session(ENGINE) as session, session.begin():
        session.add(
            IdempotencyKey(key=key, request_hash=request_hash, status=201, response=body)
        )
    return 201, body


def claim(key, request_hash, item, quantity):
    with Session(ENGINE) as session, session.begin():
        claimed = session.execute(
            insert(IdempotencyKey)
            .values(key=key, request_hash=request_hash)
            .on_conflict_do_nothing(index_elements=["key"])
            .returning(IdempotencyKey.key)
        ).first()
        if claimed is None:
            saved = session.get(IdempotencyKey, key)
            return replay(saved, request_hash)
        order = Order(item=item, quantity=quantity)
        session.add(order)
        session.flush()
        body = {"id": str(order.id), "item": item, "quantity": quantity}
        saved = session.get(IdempotencyKey, key)
        saved.status, saved.response = 201, body
    return 201, body


class OrderIn(BaseModel):
    """An order's body; FastAPI answers 422 to one that does not fit."""

    item: str
    quantity: int


@app.post("/orders")
def place_order(order: OrderIn, idempotency_key: str | None = Header(default=None)):
    if not idempotency_key:
        return JSONResponse({"error": "the Idempotency-Key header is required"}, 400)
    request = json.dumps(order.model_dump(), sort_keys=True)
    request_hash = hashlib.sha256(request.encode()).hexdigest()
    handler = claim if VARIANT == "claim" else lookup_first
    status, body = handler(idempotency_key, request_hash, order.item, order.quantity)
    return JSONResponse(body, status)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
