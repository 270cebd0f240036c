-- purge_next: the first seq at or after @from (the next key range's start), or null.
SELECT min(seq) FROM {{schema}}.events WHERE seq >= @from
