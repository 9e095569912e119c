"""Scanner devices and their pairing codes in the store (few per event).

Every read is by ``_id`` (pushed down on FerretDB v1) except an event's list.
A pairing code is used once without a transaction: the exchange deletes its
document, and only the call whose delete removed it pairs (``take_pairing``).
"""

from __future__ import annotations

from datetime import datetime

from ticketry.device_documents import DevicePairing, ScanDevice


class Devices:
    """The events' scanner devices."""

    @staticmethod
    async def get(device_id: str) -> ScanDevice | None:
        return await ScanDevice.get(device_id)

    @staticmethod
    async def of_event(event_id: str) -> list[ScanDevice]:
        """An event's devices in id order."""
        return await ScanDevice.find({"event_id": event_id}).sort("_id").to_list()

    @staticmethod
    async def create(device: ScanDevice, pairing: DevicePairing) -> None:
        """The device, then its code (a crash between leaves a device that was never paired)."""
        await device.insert()
        await pairing.insert()

    @staticmethod
    async def pairing(code_digest: str) -> DevicePairing | None:
        return await DevicePairing.get(code_digest)

    @staticmethod
    async def take_pairing(code_digest: str) -> bool:
        """Deletes the code's document: True for the one call that removed it."""
        done = await DevicePairing.get_pymongo_collection().delete_one({"_id": code_digest})
        return done.deleted_count == 1

    @staticmethod
    async def paired(device_id: str, secret_digest: str, at: datetime) -> None:
        await ScanDevice.get_pymongo_collection().update_one(
            {"_id": device_id}, {"$set": {"secret_digest": secret_digest, "paired_at": at, "last_seen_at": at}}
        )

    @staticmethod
    async def seen(device_id: str, at: datetime) -> None:
        await ScanDevice.get_pymongo_collection().update_one({"_id": device_id}, {"$set": {"last_seen_at": at}})

    @staticmethod
    async def revoke(device_id: str, at: datetime) -> None:
        """Sets ``revoked_at`` once: a second revocation keeps the first time."""
        await ScanDevice.get_pymongo_collection().update_one(
            {"_id": device_id, "revoked_at": None}, {"$set": {"revoked_at": at}}
        )
