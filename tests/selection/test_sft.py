import pyarrow as pa

from bonforge.selection.sft import MESSAGES, sft_messages


def test_each_row_is_one_user_and_one_assistant_turn_with_its_columns_beside():
    rows = pa.table({"question": ["2+2?", "Capital of France?"], "text": ["4", "$Paris$"],
                     "problem_id": ["p1", "p2"], "value": pa.array([1, 2], pa.int64())})
    out = sft_messages(rows, {"problem_id": pa.string(), "value": pa.float64()})
    assert out.schema == pa.schema([("messages", MESSAGES), ("problem_id", pa.string()), ("value", pa.float64())])
    assert out.to_pylist() == [
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
         "problem_id": "p1", "value": 1.0},
        {"messages": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "$Paris$"}],
         "problem_id": "p2", "value": 2.0}]


def test_no_rows_give_an_empty_table_of_the_same_schema():
    rows = pa.table({"question": pa.array([], pa.string()), "text": pa.array([], pa.string()),
                     "problem_id": pa.array([], pa.string())})
    out = sft_messages(rows, {"problem_id": pa.string()})
    assert out.num_rows == 0 and out.schema.names == ["messages", "problem_id"]
