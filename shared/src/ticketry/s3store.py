"""PDFs as objects of an S3-compatible store (``TICKETRY_STORAGE_BACKEND=s3``).

Keys are ``<order id>/<ticket id>.pdf`` (``ticketry.storage.pdf_key``). A
successful PutObject is durable by S3's contract, so a ticket is announced only
after its put returned. Downloads are presigned GET URLs (SigV4, path-style, so
any S3-compatible server and a bare ``host:port`` endpoint work) that the api
redirects to. The client is aiobotocore's, made at the first call (after a
renderer's fork, inside its event loop), which also creates the bucket when it
is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from ticketry.storage import StorageUnavailable, order_prefix, pass_key, pdf_key

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

    from ticketry.settings import CommonSettings

_MISSING = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
_DELETE_CHUNK = 1000  # DeleteObjects takes at most 1,000 keys


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _unavailable(exc: BotoCoreError | ClientError) -> StorageUnavailable:
    """What the callers of the store see of an S3 client error: the store is
    unreachable or refused (the cause is chained where it is raised)."""
    return StorageUnavailable(f"S3: {type(exc).__name__}: {exc}")


def _unless_missing(exc: BotoCoreError | ClientError) -> None:
    """Return when ``exc`` says the object (or bucket) is not there; else the
    store is unreachable or refused: :class:`StorageUnavailable`."""
    if isinstance(exc, ClientError) and _code(exc) in _MISSING:
        return
    raise _unavailable(exc) from exc


class S3Store:
    def __init__(
        self, *, bucket: str, endpoint_url: str | None, public_endpoint_url: str | None, region: str,
        access_key_id: str | None, secret_access_key: str | None, presign_ttl_s: int, pool: int = 32,
    ) -> None:  # fmt: skip
        self.bucket = bucket
        self.presign_ttl_s = presign_ttl_s
        self._endpoints = (endpoint_url, public_endpoint_url)
        self._client_args: dict[str, Any] = {
            "region_name": region,
            "aws_access_key_id": access_key_id,
            "aws_secret_access_key": secret_access_key,
            "config": AioConfig(
                signature_version="s3v4", s3={"addressing_style": "path"}, max_pool_connections=pool,
                connect_timeout=2, read_timeout=10, retries={"mode": "standard", "max_attempts": 2},
            ),
        }  # fmt: skip
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()
        self._client: S3Client | None = None
        self._presigner: S3Client | None = None

    @classmethod
    def from_settings(cls, settings: CommonSettings) -> S3Store:
        def secret(v: Any) -> str | None:
            return None if v is None else str(v.get_secret_value())

        return cls(
            bucket=settings.s3_bucket, endpoint_url=settings.s3_endpoint_url,
            public_endpoint_url=settings.s3_public_endpoint_url, region=settings.s3_region,
            access_key_id=secret(settings.s3_access_key_id), secret_access_key=secret(settings.s3_secret_access_key),
            presign_ttl_s=settings.s3_presign_ttl_s,
        )  # fmt: skip

    async def _s3(self) -> S3Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                try:
                    await self._open()
                except (BotoCoreError, ClientError) as exc:
                    await self._stack.aclose()
                    raise _unavailable(exc) from exc
        assert self._client is not None
        return self._client

    async def _open(self) -> None:
        session = get_session()
        endpoint, public = self._endpoints
        client = await self._stack.enter_async_context(
            session.create_client("s3", endpoint_url=endpoint, **self._client_args)
        )
        presigner = client
        if public is not None and public != endpoint:
            # Signing needs no connection; this client only builds URLs for buyers.
            presigner = await self._stack.enter_async_context(
                session.create_client("s3", endpoint_url=public, **self._client_args)
            )
        try:
            await client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _code(exc) not in _MISSING:
                raise
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                await client.create_bucket(Bucket=self.bucket)
        self._client, self._presigner = client, presigner

    async def put_all(self, items: Sequence[tuple[str, str, bytes]]) -> list[Exception | None]:
        try:
            s3 = await self._s3()
        except StorageUnavailable as exc:
            return [exc for _ in items]

        async def put(order_id: str, ticket_id: str, pdf: bytes) -> None:
            try:
                await s3.put_object(Bucket=self.bucket, Key=pdf_key(order_id, ticket_id), Body=pdf,
                                    ContentType="application/pdf")  # fmt: skip
            except (BotoCoreError, ClientError) as exc:
                # The store's trouble, not the ticket's (the renderer waits an outage out).
                raise _unavailable(exc) from exc

        done = await asyncio.gather(*(put(*item) for item in items), return_exceptions=True)
        out: list[Exception | None] = []
        for r in done:
            if isinstance(r, BaseException) and not isinstance(r, Exception):
                raise r  # cancelled, interrupted: not a ticket's failure
            out.append(r)
        return out

    async def stored(self, order_id: str, ticket_ids: Collection[str]) -> set[str]:
        """One listing of the order's keys from the least asked for to the
        greatest (ticket ids sort by their place in the order)."""
        wanted = {pdf_key(order_id, t): t for t in ticket_ids}
        if not wanted:
            return set()
        first, last = min(wanted), max(wanted)
        s3 = await self._s3()
        found: set[str] = set()
        # StartAfter is exclusive: start just before the first key.
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": order_prefix(order_id), "StartAfter": first[:-1]}
        try:
            while True:
                page = await s3.list_objects_v2(**kwargs)
                keys = [o["Key"] for o in page.get("Contents", []) if "Key" in o]
                found |= {wanted[k] for k in keys if k in wanted}
                if not page.get("IsTruncated") or not keys or keys[-1] >= last:
                    return found
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        except (BotoCoreError, ClientError) as exc:
            raise _unavailable(exc) from exc

    async def exists(self, order_id: str, ticket_id: str) -> bool:
        try:
            key = pdf_key(order_id, ticket_id)
        except ValueError:
            return False
        s3 = await self._s3()
        try:
            await s3.head_object(Bucket=self.bucket, Key=key)
        except (BotoCoreError, ClientError) as exc:
            _unless_missing(exc)
            return False
        return True

    async def read(self, order_id: str, ticket_id: str) -> bytes | None:
        try:
            return await self._get(pdf_key(order_id, ticket_id))
        except ValueError:
            return None

    async def _get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        s3 = await self._s3()
        try:
            obj = await s3.get_object(Bucket=self.bucket, Key=key)
            async with obj["Body"] as body:
                data: bytes = await body.read()
                return data
        except (BotoCoreError, ClientError) as exc:
            _unless_missing(exc)
            return None

    async def download_url(self, order_id: str, ticket_id: str) -> str | None:
        key = pdf_key(order_id, ticket_id)
        await self._s3()
        assert self._presigner is not None
        url: str = await self._presigner.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.bucket, "Key": key, "ResponseContentType": "application/pdf",
                "ResponseContentDisposition": f'attachment; filename="{ticket_id}.pdf"',
                "ResponseCacheControl": "private, no-store",
            },
            ExpiresIn=self.presign_ttl_s,
        )  # fmt: skip
        return url

    async def read_pass(self, order_id: str, ticket_id: str) -> bytes | None:
        try:
            return await self._get(pass_key(order_id, ticket_id))
        except ValueError:
            return None

    async def put_pass(self, order_id: str, ticket_id: str, pkpass: bytes) -> None:
        s3 = await self._s3()
        try:
            await s3.put_object(Bucket=self.bucket, Key=pass_key(order_id, ticket_id), Body=pkpass,
                                ContentType="application/vnd.apple.pkpass")  # fmt: skip
        except (BotoCoreError, ClientError) as exc:
            raise _unavailable(exc) from exc

    async def delete_pass(self, order_id: str, ticket_id: str) -> None:
        try:
            key = pass_key(order_id, ticket_id)
        except ValueError:
            return
        s3 = await self._s3()
        try:
            await s3.delete_object(Bucket=self.bucket, Key=key)
        except (BotoCoreError, ClientError) as exc:
            raise _unavailable(exc) from exc

    async def delete_order(self, order_id: str) -> None:
        try:
            prefix = order_prefix(order_id)
        except ValueError:
            return
        s3 = await self._s3()
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        try:
            while True:
                page = await s3.list_objects_v2(**kwargs)
                keys = [o["Key"] for o in page.get("Contents", []) if "Key" in o]
                for i in range(0, len(keys), _DELETE_CHUNK):
                    chunk = keys[i : i + _DELETE_CHUNK]
                    resp = await s3.delete_objects(
                        Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}
                    )
                    if resp.get("Errors"):
                        raise StorageUnavailable(f"S3: {len(resp['Errors'])} deletes refused: {resp['Errors'][0]}")
                if not page.get("IsTruncated"):
                    return
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        except (BotoCoreError, ClientError) as exc:
            raise _unavailable(exc) from exc

    async def aclose(self) -> None:
        self._client = self._presigner = None
        await self._stack.aclose()
