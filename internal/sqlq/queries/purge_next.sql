-- purge_next: the first seq at or after $1 (the next key range's start), or null.
SELECT min(seq) FROM {{schema}}.events WHERE seq >= $1
