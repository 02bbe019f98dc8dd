# call 1: the sanitizers on the exact build (owed since session 40): tiled_perm (attention, 262144 boundary under memcheck), then chunked_ahead (gdn)
source _run/head.sh
step san_attention 290 bash bench/sanitize.sh $OUT/san_attention --family attention --variants tiled_perm
step san_gdn 290 bash bench/sanitize.sh $OUT/san_gdn --family gdn --variants chunked_ahead
