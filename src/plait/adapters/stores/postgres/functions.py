"""Server-side functions of the PostgreSQL store (created by migration 6).

``plait_commit`` is the commit ports (``start_run``/``commit``) as one statement: one
round trip, and in autocommit its own transaction (no ``BEGIN``/``COMMIT`` round trips).
It does what the statements it replaced did, in the same order and under the same locks:
lock the session row, read the version in a new statement (under READ COMMITTED each
statement of a volatile function sees everything committed while it waited for the lock),
check it, insert or fence and update the run (``FOR UPDATE``; the lease rule of
:func:`._state.resolve_lease`), check and upsert the execution records, insert the
messages with their sequence numbers. A rule it finds broken raises ``P0001`` with
message ``plait:<what>`` and the stored values as a JSON array in the detail, which
:mod:`.commit` turns into the store's usual error (built by :mod:`..shared.state`);
the raise rolls the whole statement back, so nothing of a refused commit is written.
"""

from __future__ import annotations

__all__ = [
    "CLAIM_FUNCTION",
    "CLAIM_FUNCTION_V9",
    "CLAIM_FUNCTION_V11",
    "CLAIM_FUNCTION_V14",
    "CLAIM_FUNCTION_V23",
    "COMMIT_EVENTS_FUNCTION",
    "COMMIT_EVENTS_FUNCTION_V21",
    "COMMIT_EVENTS_FUNCTION_V22",
    "COMMIT_EVENTS_FUNCTION_V23",
    "COMMIT_FUNCTION",
    "COMMIT_FUNCTION_V8",
    "COMMIT_FUNCTION_V10",
    "COMMIT_FUNCTION_V11",
    "COMMIT_FUNCTION_V14",
    "COMMIT_FUNCTION_V17",
    "COMMIT_FUNCTION_V21",
    "COMMIT_FUNCTION_V22",
    "MEMBERS_FUNCTION",
    "MEMBERS_FUNCTION_V23",
    "SEGMENTS_DDL",
    "VERSION_FUNCTION",
]

COMMIT_FUNCTION = """
CREATE FUNCTION plait_commit(
    p_session text, p_expected integer, p_start boolean, p_lease_owner text,
    r_id text, r_status text, r_started_at float8, r_owner text, r_expires float8,
    r_data text, r_terminal boolean,
    e_run text[], e_call text[], e_state text[], e_digest text[], e_data text[],
    m_id text[], m_kind text[], m_text bytea[], m_at float8[], m_run text[],
    m_step integer[], m_call text[], m_name text[], m_status text[], m_extra text[],
    m_schema integer[],
    OUT o_version integer, OUT o_cancel boolean
) LANGUAGE plpgsql AS $$
DECLARE
    v_active text;
    v_current integer;
    v_owner text;
    v_expires float8;
    v_pk bigint;
    f record;
    x record;
    ranks constant text[] := ARRAY['requested', 'reviewed', 'started', 'settled'];
BEGIN
    SELECT s.active_run_id INTO v_active FROM sessions AS s WHERE s.id = p_session FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING MESSAGE = 'plait:session_not_found', DETAIL = '[]';
    END IF;
    v_current := (SELECT coalesce(max(sm.seq), 0) FROM session_messages AS sm
                  WHERE sm.session_id = p_session);
    IF p_start AND v_active IS NOT NULL THEN
        RAISE EXCEPTION USING MESSAGE = 'plait:session_busy',
            DETAIL = json_build_array(v_active)::text;
    END IF;
    IF v_current <> p_expected THEN
        RAISE EXCEPTION USING MESSAGE = 'plait:version_conflict',
            DETAIL = json_build_array(v_current)::text;
    END IF;
    o_cancel := FALSE;
    IF p_start THEN
        INSERT INTO runs (id, session_id, status, started_at, lease_owner, lease_expires_at,
                          cancel_requested, data)
        VALUES (r_id, p_session, r_status, r_started_at, r_owner, r_expires, FALSE, r_data)
        ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING MESSAGE = 'plait:duplicate_run', DETAIL = '[]';
        END IF;
        IF NOT r_terminal THEN
            UPDATE sessions SET active_run_id = r_id
            WHERE id = p_session AND active_run_id IS NULL;
        END IF;
    ELSIF r_id IS NULL THEN
        IF v_active IS NOT NULL THEN
            o_cancel := coalesce(
                (SELECT r.cancel_requested FROM runs AS r WHERE r.id = v_active), FALSE);
        END IF;
    ELSE
        SELECT r.session_id, r.lease_owner, r.lease_expires_at, r.cancel_requested INTO f
        FROM runs AS r WHERE r.id = r_id FOR UPDATE;
        IF NOT FOUND OR f.session_id <> p_session THEN
            RAISE EXCEPTION USING MESSAGE = 'plait:run_not_found',
                DETAIL = json_build_array(r_id)::text;
        END IF;
        IF f.lease_owner IS NOT NULL AND f.lease_owner IS DISTINCT FROM p_lease_owner THEN
            RAISE EXCEPTION USING MESSAGE = 'plait:lease_lost',
                DETAIL = json_build_array(f.lease_owner, f.lease_expires_at)::text;
        END IF;
        v_owner := r_owner;
        v_expires := r_expires;
        IF r_terminal THEN
            v_owner := NULL;
            v_expires := NULL;
        ELSIF r_owner IS NOT NULL AND f.lease_owner = r_owner
              AND f.lease_expires_at IS NOT NULL AND r_expires < f.lease_expires_at THEN
            v_expires := f.lease_expires_at;
        END IF;
        UPDATE runs SET status = r_status, started_at = r_started_at, lease_owner = v_owner,
            lease_expires_at = v_expires, data = r_data
        WHERE id = r_id;
        IF r_terminal AND v_active = r_id THEN
            UPDATE sessions SET active_run_id = NULL
            WHERE id = p_session AND active_run_id = r_id;
        END IF;
        o_cancel := f.cancel_requested;
    END IF;
    FOR i IN 1 .. coalesce(array_length(e_call, 1), 0) LOOP
        SELECT ex.args_digest, ex.state INTO x FROM executions AS ex
        WHERE ex.session_id = p_session AND ex.run_id = e_run[i] AND ex.call_id = e_call[i];
        IF FOUND THEN
            IF x.args_digest <> e_digest[i]
               OR array_position(ranks, e_state[i]) < array_position(ranks, x.state) THEN
                RAISE EXCEPTION USING MESSAGE = 'plait:execution',
                    DETAIL = json_build_array(i - 1, x.args_digest, x.state)::text;
            END IF;
        ELSIF r_id IS DISTINCT FROM e_run[i] THEN
            PERFORM 1 FROM runs AS r WHERE r.id = e_run[i] AND r.session_id = p_session;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING MESSAGE = 'plait:run_not_found',
                    DETAIL = json_build_array(e_run[i])::text;
            END IF;
        END IF;
        INSERT INTO executions (session_id, run_id, call_id, state, args_digest, data)
        VALUES (p_session, e_run[i], e_call[i], e_state[i], e_digest[i], e_data[i])
        ON CONFLICT (session_id, run_id, call_id)
        DO UPDATE SET state = excluded.state, data = excluded.data;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(m_id, 1), 0) LOOP
        INSERT INTO messages (id, kind, text, created_at, run_id, step, call_id, name,
                              status, extra, schema_version)
        VALUES (m_id[i], m_kind[i], m_text[i], m_at[i], m_run[i], m_step[i], m_call[i],
                m_name[i], m_status[i], m_extra[i], m_schema[i])
        RETURNING pk INTO v_pk;
        INSERT INTO session_messages (session_id, seq, message_id, message_pk)
        VALUES (p_session, p_expected + i, m_id[i], v_pk)
        ON CONFLICT (session_id, message_id) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING MESSAGE = 'plait:duplicate_message',
                DETAIL = json_build_array(m_id[i])::text;
        END IF;
    END LOOP;
    o_version := p_expected + coalesce(array_length(m_id, 1), 0);
END
$$"""

# ``plait_claim`` (migration 7): a worker's claim of a queued run, the run's "running"
# write and the read of its session and history in one statement (see
# plait.application.claiming). The oldest free queued run is locked with SKIP LOCKED (two
# workers never wait on or share one), set running with the worker's lease, model and
# deadline (``data`` is the run's JSON: the model fields are set in it), then the session
# and its messages are read in a new statement (under READ COMMITTED it sees everything
# committed before). One row per message, the run and session columns repeated on each.
CLAIM_FUNCTION = """
CREATE FUNCTION plait_claim(
    p_owner text, p_now float8, p_expires float8, p_model text, p_spec text
) RETURNS TABLE (
    o_id text, o_session text, o_status text, o_started float8, o_lease_owner text,
    o_lease_expires float8, o_cancel boolean, o_data text,
    o_created float8, o_owner text, o_workspace text, o_active text, o_parent text,
    o_point text, o_title text,
    o_seq integer, o_kind text, o_mid text, o_text bytea, o_at float8, o_run text,
    o_step integer, o_call text, o_name text, o_mstatus text, o_extra text, o_schema integer
) LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    UPDATE runs AS u SET status = 'running', lease_owner = p_owner,
        lease_expires_at = p_expires,
        data = (u.data::jsonb || jsonb_build_object(
            'model', p_model, 'model_spec', p_spec,
            'deadline_at', p_now + (u.data::jsonb #>> '{budget,deadline_seconds}')::float8
        ))::text
    WHERE u.id = (SELECT q.id FROM runs AS q WHERE q.status = 'queued'
                  AND (q.lease_owner IS NULL OR q.lease_expires_at <= p_now)
                  ORDER BY q.started_at, q.ord LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING u.id, u.session_id, u.status, u.started_at, u.lease_owner,
        u.lease_expires_at, u.cancel_requested, u.data INTO r;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.id, r.session_id, r.status, r.started_at, r.lease_owner, r.lease_expires_at,
        r.cancel_requested, r.data,
        s.created_at, s.owner, s.workspace, s.active_run_id, s.parent_session_id,
        s.fork_point_message_id, s.title,
        sm.seq, m.kind, m.id, m.text, m.created_at, m.run_id, m.step, m.call_id, m.name,
        m.status, m.extra, m.schema_version
    FROM sessions AS s
    LEFT JOIN session_messages AS sm ON sm.session_id = s.id
    LEFT JOIN messages AS m ON m.pk = sm.message_pk
    WHERE s.id = r.session_id
    ORDER BY sm.seq;
END
$$"""

# Migration 8: ``plait_commit`` also returns the session's stamp (its highest summary
# generation, its number of constraints), read after the writes, for the context cache
# of :mod:`.context_cache`. Made from the function of migration 6 (frozen), which
# the migration drops first (its result type changes).
_OUT_V6 = "OUT o_version integer, OUT o_cancel boolean"
_END_V6 = "    o_version := p_expected + coalesce(array_length(m_id, 1), 0);\nEND\n$$"
assert COMMIT_FUNCTION.count(_OUT_V6) == 1
assert COMMIT_FUNCTION.endswith(_END_V6)
COMMIT_FUNCTION_V8 = COMMIT_FUNCTION.replace(
    _OUT_V6, _OUT_V6 + ",\n    OUT o_summaries integer, OUT o_constraints bigint"
).replace(
    _END_V6,
    """    o_version := p_expected + coalesce(array_length(m_id, 1), 0);
    o_summaries := (SELECT coalesce(max(su.generation), 0) FROM summaries AS su
                    WHERE su.session_id = p_session);
    o_constraints := (SELECT count(*) FROM constraint_records AS cr
                      WHERE cr.session_id = p_session);
END
$$""",
)

# Migration 9: ``plait_claim`` also returns the session's stamp (as ``plait_commit`` of
# migration 8), so a session without summaries and constraints needs no read of them
# before its first step. Made from the function of migration 7 (frozen).
_OUT_V7 = "o_mstatus text, o_extra text, o_schema integer"
_COLS_V7 = "m.status, m.extra, m.schema_version"
assert CLAIM_FUNCTION.count(_OUT_V7) == 1
assert CLAIM_FUNCTION.count(_COLS_V7) == 1
CLAIM_FUNCTION_V9 = CLAIM_FUNCTION.replace(
    _OUT_V7, _OUT_V7 + ",\n    o_summaries integer, o_constraints bigint"
).replace(
    _COLS_V7,
    _COLS_V7
    + """,
        (SELECT coalesce(max(su.generation), 0) FROM summaries AS su
         WHERE su.session_id = r.session_id),
        (SELECT count(*) FROM constraint_records AS cr WHERE cr.session_id = r.session_id)""",
)

# Migration 10: ``plait_commit`` takes the session's owner rule (``p_owner``: someone
# else's session is refused as not found, before the busy check, so it tells nothing) and
# a NULL ``p_expected`` for a run start that appends after the session's last message
# (read under the session's lock): a submission through the API is this one statement,
# no read of the session first. Made from the function of migration 8 (frozen), which
# the migration drops first (its parameters change).
_PARAMS_V8 = "p_session text, p_expected integer, p_start boolean, p_lease_owner text,"
_DECLARE_V8 = "    v_active text;\n"
_LOCK_V8 = (
    "    SELECT s.active_run_id INTO v_active FROM sessions AS s WHERE s.id = p_session"
    " FOR UPDATE;\n    IF NOT FOUND THEN\n"
)
_CURRENT_V8 = """                  WHERE sm.session_id = p_session);
"""
assert COMMIT_FUNCTION_V8.count(_PARAMS_V8) == 1
assert COMMIT_FUNCTION_V8.count(_DECLARE_V8) == 1
assert COMMIT_FUNCTION_V8.count(_LOCK_V8) == 1
assert COMMIT_FUNCTION_V8.count(_CURRENT_V8) == 1
COMMIT_FUNCTION_V10 = (
    COMMIT_FUNCTION_V8.replace(_PARAMS_V8, _PARAMS_V8 + " p_owner text,")
    .replace(_DECLARE_V8, _DECLARE_V8 + "    v_session_owner text;\n")
    .replace(
        _LOCK_V8,
        """    SELECT s.active_run_id, s.owner INTO v_active, v_session_owner
    FROM sessions AS s WHERE s.id = p_session FOR UPDATE;
    IF NOT FOUND OR (p_owner IS NOT NULL AND v_session_owner IS DISTINCT FROM p_owner) THEN
""",
    )
    .replace(_CURRENT_V8, _CURRENT_V8 + "    p_expected := coalesce(p_expected, v_current);\n")
)

# Migration 11: fencing by lease token (issue 20). ``plait_commit`` takes the writer's
# token (``p_lease_token``) and the run it is for (``p_lease_run``, for a commit that
# writes no run): the run row is locked and the commit refused (``plait:lease_taken``,
# nothing written) if the run was claimed since (another token) or has ended, whether
# or not it holds a lease now. ``plait_claim`` makes the claimed run's token one higher
# and returns it (last column). Made from the functions of migrations 10 and 9 (frozen).
_ENDED = "'completed', 'budget_exhausted', 'failed', 'cancelled'"
_PARAMS_V10 = "p_lease_owner text, p_owner text,"
_FENCE_READ_V10 = (
    "        SELECT r.session_id, r.lease_owner, r.lease_expires_at, r.cancel_requested INTO f\n"
    "        FROM runs AS r WHERE r.id = r_id FOR UPDATE;\n"
    "        IF NOT FOUND OR f.session_id <> p_session THEN\n"
    "            RAISE EXCEPTION USING MESSAGE = 'plait:run_not_found',\n"
    "                DETAIL = json_build_array(r_id)::text;\n"
    "        END IF;\n"
)
_NO_RUN_V10 = "    ELSIF r_id IS NULL THEN\n"
assert COMMIT_FUNCTION_V10.count(_PARAMS_V10) == 1
assert COMMIT_FUNCTION_V10.count(_FENCE_READ_V10) == 1
assert COMMIT_FUNCTION_V10.count(_NO_RUN_V10) == 1
_TOKEN_CHECK = f"""        IF p_lease_token IS NOT NULL
                AND (f.lease_token IS DISTINCT FROM p_lease_token OR f.status IN ({_ENDED})) THEN
            RAISE EXCEPTION USING MESSAGE = 'plait:lease_taken',
                DETAIL = json_build_array(f.lease_token, f.status IN ({_ENDED}))::text;
        END IF;
"""
COMMIT_FUNCTION_V11 = (
    COMMIT_FUNCTION_V10.replace(
        _PARAMS_V10, _PARAMS_V10 + "\n    p_lease_token bigint, p_lease_run text,"
    )
    .replace(
        _FENCE_READ_V10,
        _FENCE_READ_V10.replace(
            "r.cancel_requested INTO f",
            "r.cancel_requested,\n            r.lease_token, r.status INTO f",
        )
        + _TOKEN_CHECK,
    )
    .replace(
        _NO_RUN_V10,
        _NO_RUN_V10
        + """        IF p_lease_token IS NOT NULL THEN
            SELECT r.session_id, r.lease_token, r.status INTO f FROM runs AS r
            WHERE r.id = p_lease_run AND r.session_id = p_session FOR SHARE;
"""
        + "    "
        + _TOKEN_CHECK.replace("\n        ", "\n            ")
        + "        END IF;\n",
    )
)

_SET_V9 = "    UPDATE runs AS u SET status = 'running', lease_owner = p_owner,\n"
_RETURNING_V9 = "        u.lease_expires_at, u.cancel_requested, u.data INTO r;\n"
_OUT_V9 = "o_summaries integer, o_constraints bigint"
_LAST_V9 = "(SELECT count(*) FROM constraint_records AS cr WHERE cr.session_id = r.session_id)"
assert CLAIM_FUNCTION_V9.count(_SET_V9) == 1
assert CLAIM_FUNCTION_V9.count(_RETURNING_V9) == 1
assert CLAIM_FUNCTION_V9.count(_OUT_V9) == 1
assert CLAIM_FUNCTION_V9.count(_LAST_V9) == 1
CLAIM_FUNCTION_V11 = (
    CLAIM_FUNCTION_V9.replace(_SET_V9, _SET_V9 + "        lease_token = u.lease_token + 1,\n")
    .replace(_RETURNING_V9, _RETURNING_V9.replace("u.data INTO r", "u.data, u.lease_token INTO r"))
    .replace(_OUT_V9, _OUT_V9 + ", o_token bigint")
    .replace(_LAST_V9, _LAST_V9 + ",\n        r.lease_token")
)

# Forks that do not copy (see segments.py): a branch holds only its own membership rows;
# ``session_segments`` says which seq ranges of it are which ancestor's rows.
# ``plait_members(p)`` is a session's resolved membership (its own rows for a session
# without segments), ``plait_version(p)`` its highest seq (a branch without messages of
# its own yet: its fork point). ``plait_commit`` reads the version through it and refuses
# an id the branch's inherited prefix holds; ``plait_claim`` reads the history through
# ``plait_members``. Made from the functions of migration 11 (frozen).
SEGMENTS_DDL = """CREATE TABLE session_segments (
    session_id TEXT NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL,
    owner_id TEXT NOT NULL, PRIMARY KEY (session_id, lo))"""
MEMBERS_FUNCTION = """
CREATE FUNCTION plait_members(p text)
RETURNS TABLE (seq integer, message_id text, message_pk bigint)
LANGUAGE sql STABLE AS $$
    SELECT sm.seq, sm.message_id, sm.message_pk FROM session_messages AS sm
    WHERE sm.session_id = p
      AND NOT EXISTS (SELECT 1 FROM session_segments AS g WHERE g.session_id = p)
    UNION ALL
    SELECT sm.seq, sm.message_id, sm.message_pk FROM session_segments AS g
    JOIN session_messages AS sm ON sm.session_id = g.owner_id AND sm.seq BETWEEN g.lo AND g.hi
    WHERE g.session_id = p
$$"""
VERSION_FUNCTION = """
CREATE FUNCTION plait_version(p text) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT max(sm.seq) FROM session_messages AS sm WHERE sm.session_id = p),
        (SELECT max(g.hi) FROM session_segments AS g
         WHERE g.session_id = p AND g.owner_id <> p),
        0)
$$"""
_CURRENT_V11 = """    v_current := (SELECT coalesce(max(sm.seq), 0) FROM session_messages AS sm
                  WHERE sm.session_id = p_session);
"""
_INSERT_V11 = (
    "    FOR i IN 1 .. coalesce(array_length(m_id, 1), 0) LOOP\n        INSERT INTO messages"
)
assert COMMIT_FUNCTION_V11.count(_CURRENT_V11) == 1
assert COMMIT_FUNCTION_V11.count(_INSERT_V11) == 1
_PREFIX_CHECK_V14 = """        PERFORM 1 FROM session_segments AS g
        JOIN session_messages AS sm ON sm.session_id = g.owner_id
            AND sm.message_id = m_id[i] AND sm.seq BETWEEN g.lo AND g.hi
        WHERE g.session_id = p_session AND g.owner_id <> p_session;
        IF FOUND THEN
            RAISE EXCEPTION USING MESSAGE = 'plait:duplicate_message',
                DETAIL = json_build_array(m_id[i])::text;
        END IF;
"""
COMMIT_FUNCTION_V14 = COMMIT_FUNCTION_V11.replace(
    _CURRENT_V11, "    v_current := plait_version(p_session);\n"
).replace(
    _INSERT_V11,
    "    FOR i IN 1 .. coalesce(array_length(m_id, 1), 0) LOOP\n"
    + _PREFIX_CHECK_V14
    + "        INSERT INTO messages",
)
_MEMBERS_V11 = "    LEFT JOIN session_messages AS sm ON sm.session_id = s.id\n"
assert CLAIM_FUNCTION_V11.count(_MEMBERS_V11) == 1
CLAIM_FUNCTION_V14 = CLAIM_FUNCTION_V11.replace(
    _MEMBERS_V11, "    LEFT JOIN LATERAL plait_members(s.id) AS sm ON TRUE\n"
)

# Migration 17: ``plait_commit`` reads the session's version with the expression of
# ``plait_version`` written out, not by calling it. A SQL function called from PL/pgSQL
# is parsed and planned again in every transaction (its plan lives as long as the
# calling expression's state, which PL/pgSQL rebuilds per transaction), and each commit
# is a transaction of its own: about 0.1 ms of the server's CPU per commit, where the
# same two subqueries written in place keep their plans for the connection's life.
# Same result, same locks. Made from the function of migration 15 (frozen), replaced in
# place (same parameters and result).
_VERSION_CALL_V14 = "    v_current := plait_version(p_session);\n"
_CURRENT_V17 = """    v_current := coalesce(
        (SELECT max(sm.seq) FROM session_messages AS sm WHERE sm.session_id = p_session),
        (SELECT max(g.hi) FROM session_segments AS g
         WHERE g.session_id = p_session AND g.owner_id <> p_session),
        0);
"""
assert COMMIT_FUNCTION_V14.count(_VERSION_CALL_V14) == 1
assert COMMIT_FUNCTION_V14.count("\nCREATE FUNCTION plait_commit(") == 1
COMMIT_FUNCTION_V17 = COMMIT_FUNCTION_V14.replace(
    "\nCREATE FUNCTION plait_commit(", "\nCREATE OR REPLACE FUNCTION plait_commit("
).replace(_VERSION_CALL_V14, _CURRENT_V17)

# Migration 20: a step's commit and run events in one statement, one transaction, one
# durable flush (issue 27). ``plait_commit`` is called as is (its checks, locks and
# fencing: the run row is locked and its lease token checked before anything is written,
# so a writer whose lease was taken over writes neither its step nor its events); the
# events (of the commit's run and of the writer's other runs) are then written as
# ``service._APPEND`` writes them: each run's fenced by its own token (a run claimed
# since gets none), numbered after its last one. Nothing is notified here: ``pg_notify``
# in a durable transaction holds a database-wide lock until the commit's WAL flush is
# done, so every step commit of every worker would go one at a time; the store notifies
# after the commit (see ``store.py``). Each array behind a scalar subquery, as in
# ``service._APPEND``: the generic plan is kept instead of one made for the values.
COMMIT_EVENTS_FUNCTION = """
CREATE FUNCTION plait_commit_events(
    p_session text, p_expected integer, p_start boolean, p_lease_owner text, p_owner text,
    p_lease_token bigint, p_lease_run text,
    r_id text, r_status text, r_started_at float8, r_owner text, r_expires float8,
    r_data text, r_terminal boolean,
    e_run text[], e_call text[], e_state text[], e_digest text[], e_data text[],
    m_id text[], m_kind text[], m_text bytea[], m_at float8[], m_run text[],
    m_step integer[], m_call text[], m_name text[], m_status text[], m_extra text[],
    m_schema integer[],
    v_run text[], v_type text[], v_at float8[], v_data text[], v_token integer[],
    OUT o_version integer, OUT o_cancel boolean, OUT o_summaries integer,
    OUT o_constraints bigint, OUT o_runs text[], OUT o_last integer[]
) LANGUAGE plpgsql AS $$
BEGIN
    SELECT c.o_version, c.o_cancel, c.o_summaries, c.o_constraints
        INTO o_version, o_cancel, o_summaries, o_constraints
        FROM plait_commit(p_session, p_expected, p_start, p_lease_owner, p_owner,
            p_lease_token, p_lease_run, r_id, r_status, r_started_at, r_owner, r_expires,
            r_data, r_terminal, e_run, e_call, e_state, e_digest, e_data, m_id, m_kind,
            m_text, m_at, m_run, m_step, m_call, m_name, m_status, m_extra, m_schema) AS c;
    WITH given AS (
        SELECT * FROM unnest((SELECT v_run), (SELECT v_type), (SELECT v_at),
                             (SELECT v_data), (SELECT v_token))
            WITH ORDINALITY AS n(run_id, type, at, data, token, ord)
    ), fenced AS (
        SELECT g.* FROM given AS g WHERE EXISTS (
            SELECT 1 FROM runs AS r WHERE r.id = g.run_id AND r.lease_token = g.token)
    ), base AS (
        SELECT f.run_id, coalesce(
            (SELECT max(ev.seq) FROM run_events AS ev WHERE ev.run_id = f.run_id), 0) AS last
        FROM (SELECT DISTINCT run_id FROM fenced) AS f
    ), ins AS (
        INSERT INTO run_events (run_id, seq, type, at, data)
        SELECT n.run_id, b.last + row_number() OVER (PARTITION BY n.run_id ORDER BY n.ord),
            n.type, n.at, n.data
        FROM fenced AS n JOIN base AS b ON b.run_id = n.run_id
        RETURNING run_id, seq
    )
    SELECT array_agg(x.run_id), array_agg(x.last) INTO o_runs, o_last
    FROM (SELECT ins.run_id, max(ins.seq) AS last FROM ins GROUP BY ins.run_id) AS x;
END $$"""

# Migration 21 (issue 27: less of the server's CPU per step). ``plait_commit`` reads once
# whether the session inherits a prefix (a branch's segments owned by an ancestor) and
# checks a new message's id against that prefix only then: the check was a join per
# message, on every session, the costliest statement of a commit for one that found
# nothing. ``plait_commit_events`` does the commit's work in its own body instead of
# calling ``plait_commit`` (a nested call is a statement of its own, its 30 arguments
# copied into a new frame, its result through a function scan): same statements, same
# order, same locks and checks. Both replaced in place (same parameters and results).
_DECLARE_V17 = "    v_session_owner text;\n"
assert COMMIT_FUNCTION_V17.count(_DECLARE_V17) == 1
assert COMMIT_FUNCTION_V17.count(_CURRENT_V17) == 1
assert COMMIT_FUNCTION_V17.count(_PREFIX_CHECK_V14) == 1
COMMIT_FUNCTION_V21 = (
    COMMIT_FUNCTION_V17.replace(_DECLARE_V17, _DECLARE_V17 + "    v_inherited integer;\n")
    .replace(
        _CURRENT_V17,
        """    v_inherited := (SELECT max(g.hi) FROM session_segments AS g
                    WHERE g.session_id = p_session AND g.owner_id <> p_session);
    v_current := coalesce(
        (SELECT max(sm.seq) FROM session_messages AS sm WHERE sm.session_id = p_session),
        v_inherited, 0);
""",
    )
    .replace(
        _PREFIX_CHECK_V14,
        "        IF v_inherited IS NOT NULL THEN\n"
        + "".join("    " + line for line in _PREFIX_CHECK_V14.splitlines(keepends=True))
        + "        END IF;\n",
    )
)

_HEAD_V17 = "\nCREATE OR REPLACE FUNCTION plait_commit("
_LAST_PARAM_V17 = "    m_schema integer[],\n"
_OUT_V17 = "OUT o_summaries integer, OUT o_constraints bigint"
_END_V17 = "                      WHERE cr.session_id = p_session);\nEND\n$$"
_EVENTS_START = "    WITH given AS ("
_EVENTS_END = "END $$"
assert COMMIT_FUNCTION_V21.count(_HEAD_V17) == 1
assert COMMIT_FUNCTION_V21.count(_LAST_PARAM_V17) == 1
assert COMMIT_FUNCTION_V21.count(_OUT_V17) == 1
assert COMMIT_FUNCTION_V21.endswith(_END_V17)
assert COMMIT_EVENTS_FUNCTION.count(_EVENTS_START) == 1
assert COMMIT_EVENTS_FUNCTION.endswith(_EVENTS_END)
# The events part as migration 20 wrote it, its aliases renamed where the commit's body
# has variables of the same name (``f``, ``x``: PL/pgSQL would find them ambiguous).
_EVENTS_V20 = COMMIT_EVENTS_FUNCTION[
    COMMIT_EVENTS_FUNCTION.index(_EVENTS_START) : -len(_EVENTS_END)
]
assert _EVENTS_V20.count(") AS f\n") == 1
assert _EVENTS_V20.count(" f.run_id") == 2
assert _EVENTS_V20.count(") AS x;") == 1
assert _EVENTS_V20.count("(x.") == 2
_EVENTS_V21 = (
    _EVENTS_V20.replace(") AS f\n", ") AS d\n")
    .replace(" f.run_id", " d.run_id")
    .replace(") AS x;", ") AS w;")
    .replace("(x.", "(w.")
)
COMMIT_EVENTS_FUNCTION_V21 = (
    COMMIT_FUNCTION_V21.replace(_HEAD_V17, "\nCREATE OR REPLACE FUNCTION plait_commit_events(")
    .replace(
        _LAST_PARAM_V17,
        _LAST_PARAM_V17
        + "    v_run text[], v_type text[], v_at float8[], v_data text[], v_token integer[],\n",
    )
    .replace(_OUT_V17, _OUT_V17 + ",\n    OUT o_runs text[], OUT o_last integer[]")
    .replace(_END_V17, _END_V17[: -len("END\n$$")] + _EVENTS_V21 + "END\n$$")
)

# Migration 22: fencing before the version. A commit of a run whose lease was taken over
# is refused for its lease (``plait:lease_taken``/``plait:lease_lost``: the process stops
# driving the run) also when the new holder has appended since, which puts the stale
# commit's version behind as well: the version was checked first, and the stale writer
# was told of a conflict with another writer instead. A run's start checks its version
# where it did; a commit checks it after its run's fencing and before its records and
# messages (a refused commit writes nothing either way: the raise rolls the statement
# back). Both functions replaced in place (same parameters and results).
_VERSION_CHECK_V21 = """    IF v_current <> p_expected THEN
        RAISE EXCEPTION USING MESSAGE = 'plait:version_conflict',
            DETAIL = json_build_array(v_current)::text;
    END IF;
"""
_EXECUTIONS_V21 = "    FOR i IN 1 .. coalesce(array_length(e_call, 1), 0) LOOP\n"


def _fenced_first(function: str) -> str:
    assert function.count(_VERSION_CHECK_V21) == 1
    assert function.count(_EXECUTIONS_V21) == 1
    start = _VERSION_CHECK_V21.replace("IF v_current", "IF p_start AND v_current")
    later = _VERSION_CHECK_V21.replace("IF v_current", "IF NOT p_start AND v_current")
    return function.replace(_VERSION_CHECK_V21, start).replace(
        _EXECUTIONS_V21, later + _EXECUTIONS_V21
    )


COMMIT_FUNCTION_V22 = _fenced_first(COMMIT_FUNCTION_V21)
COMMIT_EVENTS_FUNCTION_V22 = _fenced_first(COMMIT_EVENTS_FUNCTION_V21)


# Migration 23: plans that stay lookups by key as the tables grow (issue 27). PL/pgSQL
# keeps a statement's generic plan from its sixth execution on a connection until the
# tables' statistics change, and a worker's connections are warmed (``warm.py``) while a
# new database's tables are nearly empty. Two statements were then planned as hash joins
# over a whole table: a step commit's event fencing read every run (``EXISTS`` became a
# hash semi-join on ``runs``), and a claim's history read every message (a hash join on
# ``messages``). Each kept doing so as the tables grew, until autovacuum analyzed them:
# on a new service 1,000 runs in, a run's statements read ~5,000 rows they did not need.
# A branch's members (``plait_members``, the claim's and every read's) were a hash join
# over every session's membership rows. All are written so that no estimate can make
# them joins over a table: the fencing compares each event's token with its run's (a
# scalar subquery: one lookup by the primary key per event); the history takes each
# member's message by its key, and a branch each segment's rows by their seq range
# (lateral subqueries, kept apart from the join by ``OFFSET 0``). Same results, same
# locks; ``plait_members`` is replaced in place (its callers inline it).
_FENCE_V20 = """        SELECT g.* FROM given AS g WHERE EXISTS (
            SELECT 1 FROM runs AS r WHERE r.id = g.run_id AND r.lease_token = g.token)
"""
_FENCE_V23 = """        SELECT g.* FROM given AS g
        WHERE g.token = (SELECT r.lease_token FROM runs AS r WHERE r.id = g.run_id)
"""
assert COMMIT_EVENTS_FUNCTION_V22.count(_FENCE_V20) == 1
COMMIT_EVENTS_FUNCTION_V23 = COMMIT_EVENTS_FUNCTION_V22.replace(_FENCE_V20, _FENCE_V23)

_CLAIM_HEAD_V14 = "\nCREATE FUNCTION plait_claim("
_HISTORY_V14 = "    LEFT JOIN messages AS m ON m.pk = sm.message_pk\n"
_HISTORY_V23 = """    LEFT JOIN LATERAL (
        SELECT * FROM messages AS one WHERE one.pk = sm.message_pk OFFSET 0) AS m ON TRUE
"""
assert CLAIM_FUNCTION_V14.count(_CLAIM_HEAD_V14) == 1
assert CLAIM_FUNCTION_V14.count(_HISTORY_V14) == 1
CLAIM_FUNCTION_V23 = CLAIM_FUNCTION_V14.replace(
    _CLAIM_HEAD_V14, "\nCREATE OR REPLACE FUNCTION plait_claim("
).replace(_HISTORY_V14, _HISTORY_V23)

_MEMBERS_HEAD = "\nCREATE FUNCTION plait_members("
_SEGMENT_ROWS_V15 = (
    "    JOIN session_messages AS sm ON sm.session_id = g.owner_id"
    " AND sm.seq BETWEEN g.lo AND g.hi\n"
)
_SEGMENT_ROWS_V23 = """    CROSS JOIN LATERAL (
        SELECT * FROM session_messages AS one
        WHERE one.session_id = g.owner_id AND one.seq BETWEEN g.lo AND g.hi OFFSET 0) AS sm
"""
assert MEMBERS_FUNCTION.count(_MEMBERS_HEAD) == 1
assert MEMBERS_FUNCTION.count(_SEGMENT_ROWS_V15) == 1
MEMBERS_FUNCTION_V23 = MEMBERS_FUNCTION.replace(
    _MEMBERS_HEAD, "\nCREATE OR REPLACE FUNCTION plait_members("
).replace(_SEGMENT_ROWS_V15, _SEGMENT_ROWS_V23)
