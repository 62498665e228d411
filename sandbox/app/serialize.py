"""The app's response bodies (reservation-api.md §3), every listed field always present."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sandbox.app.state import AppState, GpuClass, Group, OverstayRecord, Reservation, User
from sandbox.app.timeutil import local, local_text, utc_text


def _user_brief(user: User | None) -> dict[str, Any] | None:
    return None if user is None else {"id": user.id, "username": user.username}


def class_brief(klass: GpuClass) -> dict[str, Any]:
    return {"id": klass.id, "name": klass.name, "label_value": klass.label_value}


def reservation_json(state: AppState, row: Reservation) -> dict[str, Any]:
    """``ReservationResponse``."""
    zone = state.zone
    user = state.users.get(row.user_id) if row.user_id is not None else None
    group = state.groups.get(row.group_id) if row.group_id is not None else None
    submitter = state.users.get(row.submitted_by_id) if row.submitted_by_id else None
    return {
        "id": row.id,
        "user_id": row.user_id,
        "user": _user_brief(user),
        "group_id": row.group_id,
        "group": None if group is None else {"id": group.id, "name": group.name},
        "gpu_class_id": row.gpu_class_id,
        "gpu_class": class_brief(state.classes[row.gpu_class_id]),
        "start_dt": local_text(row.start, zone),
        "end_dt": local_text(row.end, zone),
        "date": local(row.start, zone).date().isoformat(),
        "start_utc": utc_text(row.start),
        "end_utc": utc_text(row.end),
        "gpu_count": row.gpu_count,
        "su_cost_user": row.su_cost_user,
        "su_cost_group": row.su_cost_group,
        "su_cost_original": row.su_cost_original,
        "kind": row.kind,
        "status": row.status,
        "notes": row.notes,
        "submitted_by_id": row.submitted_by_id,
        "submitted_by": _user_brief(submitter),
        "created_at": utc_text(row.created_at),
        "updated_at": utc_text(row.updated_at),
        "cancelled_at": utc_text(row.cancelled_at),
        "cancelled_at_local": local_text(row.cancelled_at, zone),
        "cancelled_by_id": row.cancelled_by_id,
        "cancel_reason": row.cancel_reason,
        "continued_from_id": row.continued_from_id,
    }


def class_json(state: AppState, klass: GpuClass, now: datetime) -> dict[str, Any]:
    """``GpuClassResponse``; ``effective_gpus_today`` from today's local date."""
    return {
        **class_brief(klass),
        "description": klass.description,
        "total_gpus": klass.total_gpus,
        "effective_gpus_today": klass.capacity_on(local(now, state.zone).date()),
        "su_rate_per_hour": klass.su_rate_per_hour,
        "max_gpus_per_reservation": klass.max_gpus_per_reservation,
        "relax_min_available": None,
        "relax_min_available_far": None,
        "relax_min_available_junior": None,
        "attach_all_groups": klass.attach_all_groups,
        "is_active": klass.is_active,
        "created_at": utc_text(klass.created_at),
    }


def group_json(state: AppState, group: Group, now: datetime) -> dict[str, Any]:
    """``GroupResponse`` with full class objects (§5 item 19) and member briefs."""
    members = []
    for username, role in sorted(group.members.items()):
        user = state.user_named(username)
        if user is not None:
            members.append({"id": user.id, "username": username, "role": role, "team_name": None})
    attached = [
        class_json(state, c, now)
        for c in sorted(state.classes.values(), key=lambda c: c.id)
        if c.id in group.class_ids or c.attach_all_groups
    ]
    return {
        "id": group.id,
        "name": group.name,
        "description": group.description,
        "valid_from": group.valid_from.isoformat() if group.valid_from else None,
        "valid_until": group.valid_until.isoformat() if group.valid_until else None,
        "min_days_ahead": None,
        "max_days_ahead": None,
        "su_budget": group.su_budget,
        "su_anchor_mode": group.su_anchor_mode,
        "pool_su_budget": group.pool_su_budget,
        "provisioning_source": "admin",
        "sync_with_sicad": False,
        "sicad_course_id": None,
        "allow_manager_impersonation": False,
        "researcher_mode": group.researcher_mode,
        "max_reservation_hours": group.max_reservation_hours,
        "on_demand_only": group.on_demand_only,
        "on_demand_auto_join": group.on_demand_auto_join,
        "is_active": group.is_active,
        "created_at": utc_text(group.created_at),
        "members": members,
        "gpu_classes": attached,
    }


def overstay_json(state: AppState, record: OverstayRecord) -> dict[str, Any]:
    """``OverstayResponse``, class/owner/group copied from the parent."""
    parent = state.reservations[record.reservation_id]
    return {
        "id": record.id,
        "reservation_id": record.reservation_id,
        "gpu_class_id": parent.gpu_class_id,
        "gpu_count": record.gpu_count,
        "user_id": parent.user_id,
        "group_id": parent.group_id,
        "start_dt": local_text(record.start, state.zone),
        "end_dt": local_text(record.end, state.zone),
        "start_utc": utc_text(record.start),
        "end_utc": utc_text(record.end),
        "duration_seconds": int((record.end - record.start).total_seconds()),
        "end_reason": record.end_reason,
        "pod_uid": record.pod_uid,
        "created_at": utc_text(record.created_at),
    }
