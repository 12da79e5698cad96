-- Views over trajectories (candidates.messages, JSON): turns (one row per message) and tool_calls (one row per
-- call, with the tool message that answered it: one of the tool messages right after its turn, as a checked
-- trajectory has them, since an id may come again in a later turn). Read by bonforge.storage.catalog.
CREATE VIEW turns AS
SELECT candidate_id, problem_id, teacher, position::INTEGER AS position, m->>'role' AS role, m->>'content' AS content,
       m->>'tool_call_id' AS tool_call_id, coalesce(json_array_length(m->'tool_calls'), 0)::INTEGER AS calls
FROM (SELECT candidate_id, problem_id, teacher, generate_subscripts(l, 1) - 1 AS position, unnest(l) AS m
      FROM (SELECT candidate_id, problem_id, teacher, json_extract(messages, '$[*]') AS l FROM candidates
            WHERE messages IS NOT NULL));
CREATE VIEW tool_calls AS
WITH made AS (
    SELECT candidate_id, problem_id, teacher, position, len(l) AS calls, generate_subscripts(l, 1) - 1 AS call_index,
           unnest(l) AS call
    FROM (SELECT candidate_id, problem_id, teacher, position::INTEGER AS position, json_extract(m, '$.tool_calls[*]') AS l
          FROM (SELECT candidate_id, problem_id, teacher, generate_subscripts(l, 1) - 1 AS position, unnest(l) AS m
                FROM (SELECT candidate_id, problem_id, teacher, json_extract(messages, '$[*]') AS l FROM candidates
                      WHERE messages IS NOT NULL))
          WHERE m->>'role' = 'assistant' AND json_array_length(m->'tool_calls') > 0))
SELECT m.candidate_id, m.problem_id, m.teacher, m.position, m.call_index::INTEGER AS call_index, m.call->>'id' AS call_id,
       m.call->'function'->>'name' AS tool, m.call->'function'->>'arguments' AS arguments,
       CASE WHEN json_valid(m.call->'function'->>'arguments') THEN json_extract_string(m.call->'function'->>'arguments', '$.code') END AS code,
       t.content AS output
FROM made m LEFT JOIN turns t ON t.candidate_id = m.candidate_id AND t.role = 'tool' AND t.tool_call_id = m.call->>'id'
     AND t.position BETWEEN m.position + 1 AND m.position + m.calls;
