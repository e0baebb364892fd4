"""The SQL that writes the history benchmark's rows (bench/history.py), by ``generate_series``.

Statements are separated by ``;`` and a newline; parameters ``lo``, ``hi`` (the range of row
numbers ``g`` of one batch) and ``n`` (the finished turns in all). Every NOT NULL column is set
(Django's defaults live in Python, not in the schema).
"""

from __future__ import annotations

TABLES = ["turnkit_conversation", "turnkit_turn", "turnkit_lease", "turnkit_toolexecution",
          "turnkit_wait", "turnkit_message", "turnkit_event"]

# Active turn g (one per conversation), created g seconds ago: g mod 10 in 0-3 pending, 4-6
# running (a lease, a running tool execution), 7-9 waiting for the pending turn of its ten.
_ACTIVE_ROWS = """
    SELECT g, now() - g * interval '1 second' AS c,
           CASE WHEN mod(g, 10) < 4 THEN 'pending' WHEN mod(g, 10) < 7 THEN 'running'
                ELSE 'waiting' END AS status
    FROM generate_series(%(lo)s, %(hi)s - 1) g"""

ACTIVE_SQL = f"""
INSERT INTO turnkit_conversation (id, agent_name, model, subject_id, subject_prompt, context,
    metadata, last_sequence, created_at, updated_at)
SELECT 'conv_a' || g, 'bench', 'bench-model', '', '', '{{}}', '{{}}', 2, c, c
FROM ({_ACTIVE_ROWS}) s;
INSERT INTO turnkit_turn (id, conversation_id, agent_name, root_turn_id, depth, status, model,
    options, state, context_sequence, usage, cost, cost_unknown, output_text, submitted_at,
    fence, claimed_by, fence_log, recovery_attempts, started_at, tree_iterations,
    tree_tool_executions, tree_tool_counts, tree_spend, controls, controls_pending, created_at,
    updated_at)
SELECT 'turn_a' || g, 'conv_a' || g, 'bench', 'turn_a' || g, 0, status, 'bench-model', '{{}}',
    '{{"phase": "model"}}', 1, '{{}}', 0, false, '', c,
    CASE WHEN status = 'pending' THEN 0 ELSE 1 END,
    CASE WHEN status = 'running' THEN 'bench-worker' ELSE '' END, '[]', 0,
    CASE WHEN status = 'pending' THEN NULL ELSE c END, 1, 0, '{{}}', 0, '{{}}', false, c, c
FROM ({_ACTIVE_ROWS}) s;
INSERT INTO turnkit_lease (turn_id, fence, worker, heartbeat_at)
SELECT 'turn_a' || g, 1, 'bench-worker', now() FROM ({_ACTIVE_ROWS}) s WHERE status = 'running';
INSERT INTO turnkit_toolexecution (id, turn_id, tool_call_id, tool_name, status, arguments,
    budget_denied, fence, attempts, attempt_log, started_at, created_at, updated_at)
SELECT 'tex_a' || g, 'turn_a' || g, 'call_0', 'probe', 'running', '{{"q": "probe"}}', false, 1,
    1, '[]', c, c, c
FROM ({_ACTIVE_ROWS}) s WHERE status = 'running';
INSERT INTO turnkit_wait (waiter_id, target_id, created_at)
SELECT 'turn_a' || g, 'turn_a' || (g - mod(g, 10)), c FROM ({_ACTIVE_ROWS}) s
WHERE status = 'waiting';
INSERT INTO turnkit_message (id, conversation_id, turn_id, sequence, role, kind, content,
    metadata, key, created_at)
SELECT 'msg_a' || g || '_' || k, 'conv_a' || g, 'turn_a' || g, k,
    CASE k WHEN 1 THEN 'user' ELSE 'assistant' END, 'text',
    jsonb_build_array(jsonb_build_object('type', 'text', 'text', 'message ' || k)), '{{}}', '',
    c + k * interval '10 milliseconds'
FROM ({_ACTIVE_ROWS}) s, generate_series(1, 2) k;
INSERT INTO turnkit_event (root_turn_id, turn_id, conversation_id, type, payload, created_at)
SELECT 'turn_a' || g, 'turn_a' || g, 'conv_a' || g,
    (ARRAY['turn.created', 'turn.started'])[k], '{{}}', c + k * interval '10 milliseconds'
FROM ({_ACTIVE_ROWS}) s, generate_series(1, 2) k ORDER BY g, k
"""  # noqa: S608 (constants only)

# Finished turn g of n, created (n - g) * 2 seconds before yesterday (the oldest first); two
# turns a conversation (g / 2); one in 20 failed, one in 100 of unknown cost, one in 3 inline.
_FINISHED_ROWS = """
    SELECT g, g / 2 AS conv, mod(g, 2) * 3 AS base,
           now() - interval '1 day' - (%(n)s - g) * interval '2 seconds' AS c,
           CASE WHEN mod(g, 20) = 0 THEN 'failed' ELSE 'completed' END AS status
    FROM generate_series(%(lo)s, %(hi)s - 1) g"""

FINISHED_SQL = f"""
INSERT INTO turnkit_conversation (id, agent_name, model, subject_id, subject_prompt, context,
    metadata, last_sequence, created_at, updated_at)
SELECT 'conv_h' || conv, (ARRAY['bench', 'bench-3', 'bench-chat'])[1 + mod(conv, 3)],
    'bench-model', '', '', '{{}}', '{{}}', 6, c, c + interval '5 seconds'
FROM ({_FINISHED_ROWS}) s WHERE base = 0;
INSERT INTO turnkit_turn (id, conversation_id, agent_name, root_turn_id, depth, status, model,
    options, state, context_sequence, usage, cost, cost_unknown, error, output_text,
    submitted_at, fence, claimed_by, fence_log, recovery_attempts, started_at, completed_at,
    tree_iterations, tree_tool_executions, tree_tool_counts, tree_spend, controls,
    controls_pending, created_at, updated_at)
SELECT 'turn_h' || g, 'conv_h' || conv, (ARRAY['bench', 'bench-3', 'bench-chat'])[1 + mod(conv, 3)],
    'turn_h' || g, 0, status, 'bench-model', '{{}}', '{{"phase": "done"}}', base + 1,
    '{{"input_tokens": 120, "output_tokens": 30}}', 0.0012, mod(g, 100) = 0,
    CASE WHEN status = 'failed' THEN '{{"type": "ModelError", "message": "boom"}}'::jsonb END,
    CASE WHEN status = 'completed' THEN 'the answer' ELSE '' END,
    CASE WHEN mod(g, 3) = 0 THEN NULL ELSE c END, 1, '', '[]', 0, c, c + interval '2 seconds',
    2, 1, '{{"probe": 1}}', 0.0012, '{{}}', false, c, c + interval '2 seconds'
FROM ({_FINISHED_ROWS}) s;
INSERT INTO turnkit_toolexecution (id, turn_id, tool_call_id, tool_name, status, arguments,
    result, budget_denied, fence, attempts, attempt_log, started_at, completed_at, created_at,
    updated_at)
SELECT 'tex_h' || g, 'turn_h' || g, 'call_0', 'probe', 'completed', '{{"q": "probe"}}',
    '{{"echo": "probe"}}', false, 1, 1, '[]', c + interval '1 second',
    c + interval '1 second', c + interval '1 second', c + interval '1 second'
FROM ({_FINISHED_ROWS}) s;
INSERT INTO turnkit_message (id, conversation_id, turn_id, sequence, role, kind, content,
    tool_execution_id, metadata, fence, key, created_at)
SELECT 'msg_h' || g || '_' || k, 'conv_h' || conv, 'turn_h' || g, base + k,
    (ARRAY['user', 'assistant', 'tool'])[k], (ARRAY['text', 'tool_call', 'tool_result'])[k],
    CASE k WHEN 1 THEN '[{{"type": "text", "text": "what does the probe say?"}}]'::jsonb
           WHEN 2 THEN '[{{"type": "tool_call", "id": "call_0", "name": "probe",
                           "arguments": {{"q": "probe"}}}}]'::jsonb
           ELSE '[{{"type": "tool_result", "tool_call_id": "call_0", "content": "probe"}}]'::jsonb
    END,
    CASE WHEN k = 3 THEN 'tex_h' || g END, '{{}}', CASE WHEN k > 1 THEN 1 END, '',
    c + k * interval '500 milliseconds'
FROM ({_FINISHED_ROWS}) s, generate_series(1, 3) k;
INSERT INTO turnkit_event (root_turn_id, turn_id, conversation_id, type, payload, created_at)
SELECT 'turn_h' || g, 'turn_h' || g, 'conv_h' || conv,
    (ARRAY['turn.started', 'turn.completed'])[k], '{{}}', c + k * interval '1 second'
FROM ({_FINISHED_ROWS}) s, generate_series(1, 2) k ORDER BY g, k
"""  # noqa: S608 (constants only)

__all__ = ["ACTIVE_SQL", "FINISHED_SQL", "TABLES"]
