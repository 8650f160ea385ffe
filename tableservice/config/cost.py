"""Prices that turn the cost ledger's figures into money (`service.cost`): optional; without them
`tableservice report` prints executor hours and request counts only."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

# S3's request classes as billed (`tableservice.storage.requests.RequestKind`), lower case.
REQUEST_KINDS = ("get", "put", "list", "head", "post", "delete")


class CostSettings(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    currency: str = Field(default="USD", min_length=1, max_length=8)
    executor_hour: float | None = Field(default=None, ge=0, le=10_000, allow_inf_nan=False)
    """Price of one executor hour (one Spark task slot busy for an hour)."""
    per_1000_requests: dict[str, float] = Field(default_factory=dict)
    """Price of 1,000 object-store requests by kind: get, put, list, head, post, delete (S3 bills LIST and POST
    as PUT-class)."""

    @field_validator("per_1000_requests")
    @classmethod
    def _kinds(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(REQUEST_KINDS))
        if unknown:
            raise ValueError(f"unknown request kinds {', '.join(unknown)}: expected {', '.join(REQUEST_KINDS)}")
        for kind, price in value.items():
            if not 0 <= price <= 10_000 or price != price:
                raise ValueError(f"per_1000_requests.{kind} = {price}: expected a price from 0 to 10000")
        return value

    @property
    def priced(self) -> bool:
        return self.executor_hour is not None or bool(self.per_1000_requests)
