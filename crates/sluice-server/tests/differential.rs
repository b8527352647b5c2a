//! The same command script against `sluice serve` and redis-server, the
//! replies compared byte for byte. Commands whose replies differ by design
//! (`HELLO`'s id and version; times) are left out. `.ci/run` installs redis-server, so in CI (`CI` set) this test
//! fails without it; elsewhere it says so and checks nothing.

mod common;

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Raw, TestServer};

/// One command per line, split like an inline command.
const SCRIPT: &str = r#"
FLUSHALL
SET k v
GET k
GET missing
SET k v2 NX
SET k v3 XX GET
SET n 10
INCR n
INCRBY n -5
DECR n
DECRBY n 3
INCR k
INCRBY n abc
INCRBY n 01
SET big 9223372036854775807
INCR big
DECRBY n -9223372036854775808
INCRBYFLOAT f 1.5
INCRBYFLOAT f 2
INCRBYFLOAT f abc
INCRBYFLOAT k 1
APPEND k xyz
STRLEN k
STRLEN missing
GETRANGE k 0 -1
GETRANGE k -3 -1
GETRANGE k 5 2
GETRANGE k -1 -5
GETRANGE missing 0 10
SETRANGE k 10 abc
GET k
SETRANGE k -1 x
SETRANGE missing 0 ""
EXISTS missing
MSET a 1 b 2 c 3
MGET a b missing c
MSET a
MSET a 1 b
MSETNX a 1 d 4
MSETNX d 4 e 5
EXISTS a b missing a
DEL a missing
EXISTS a
TYPE b
TYPE missing
RENAME b b2
GET b2
RENAME missing x
RENAME b2 b2
RENAMENX b2 c
RENAMENX b2 b3
GETSET b3 new
GETDEL b3
GETDEL b3
SETNX sn 1
SETNX sn 2
SETEX s 100 v
TTL s
SETEX s 0 v
PSETEX s -5 v
SETEX s abc v
SET e v EX 100
TTL e
PERSIST e
PERSIST e
TTL e
TTL missing
PTTL missing
EXPIRE e 100 NX
EXPIRE e 50 GT
EXPIRE e 200 GT
EXPIRE e 100 LT
TTL e
EXPIRE e 100 NX XX
EXPIRE e 100 GT LT
EXPIRE e 100 FOO
EXPIRE missing 10
EXPIRE e abc
SET x v PX 0
SET x v EX 10 PX 10
SET x v KEEPTTL EX 10
SET x v EX abc
SET x v EX
SET x v NX XX
SET x v FOO
GETEX e PERSIST
TTL e
GETEX missing
GETEX e EX 0
GETEX e PERSIST EX 10
EXPIRE e -1
EXISTS e
PING
PING hello
PING a b
ECHO hi
ECHO
SELECT 0
SELECT abc
SELECT 16
SELECT -1
SELECT 1
GET a
SET dbkey one
DBSIZE
SELECT 0
EXISTS dbkey
SET mv a
MOVE mv 1
MOVE mv 1
EXISTS mv
MOVE mv 0
MOVE mv 16
MOVE mv abc
SELECT 1
GET mv
MOVE mv 0
SELECT 0
GET mv
RPUSH mvl x y z
MOVE mvl 3
COPY mv mvc DB 2
COPY mv mvc DB 2
COPY mv mvc DB 2 REPLACE
COPY mv mv DB 0
SWAPDB 0 2
SWAPDB 0 2 extra
SWAPDB 0
SWAPDB x 2
SWAPDB 0 x
SWAPDB 0 16
SWAPDB -1 0
SWAPDB 0 4294967296
SWAPDB 5 5
GET mv
GET mvc
DBSIZE
SELECT 2
GET mv
GET mvc
SELECT 0
SWAPDB 2 0
GET mvc
MULTI
SET inmulti zero
SELECT 3
SET inmulti three
GET inmulti
SELECT 99
LRANGE mvl 0 -1
SELECT 0
GET inmulti
EXEC
GET inmulti
SELECT 3
GET inmulti
MULTI
SELECT 4
EXEC
SET in4 yes
SELECT 0
GET in4
SET sw0 zero
SELECT 7
SET sw7 seven
SELECT 0
MULTI
SET pre a
SWAPDB 0 7
GET sw0
GET sw7
GET pre
SET post b
SELECT 7
GET pre
GET sw0
SWAPDB 7 7
SWAPDB 7 x
SWAPDB 0 99
EXEC
GET post
GET pre
SELECT 0
GET post
GET pre
DBSIZE
MULTI
SWAPDB 0 7
SWAPDB 7 8
SELECT 8
GET sw0
GET pre
EXEC
SELECT 0
DBSIZE
MULTI
SET fa v
MOVE fa 5
SELECT 5
GET fa
SELECT 6
SET fb w
SELECT 0
FLUSHALL
SELECT 5
EXISTS fa
SELECT 6
EXISTS fb
SET fc after
EXEC
EXISTS fc
SELECT 5
DBSIZE
SELECT 0
COPY mv mv DB 2
SELECT 3
LRANGE mvl 0 -1
SELECT 2
GET mvc
GET mv
SELECT 0
NOSUCH a b
nosuch
GET
GET a b
MULTI
SET t 1
INCR t
GET t
EXEC
MULTI
MULTI
SET t 2
DISCARD
EXEC
DISCARD
MULTI
SET t 3
BADCMD
EXEC
GET t
MULTI
SET t abc
INCR t
EXEC
WATCH t
UNWATCH
DBSIZE
KEYS nomatch*
KEYS sn
CLIENT SETNAME "my name"
CLIENT SETNAME myname
CLIENT GETNAME
CLIENT NOSUCH
AUTH x
AUTH default x
HELLO 4
HELLO abc
COMMAND COUNT x
DEL x
WATCH x
FLUSHALL
MULTI
PING
EXEC
SET x 1
WATCH x
FLUSHALL
MULTI
PING
EXEC
CONFIG SET maxmemory 100mb
CONFIG GET maxmemory
CONFIG SET maxmemory 0
COMMAND LIST FILTERBY PATTERN hset
COMMAND LIST FILTERBY PATTERN client|l*
COMMAND LIST FOO
COMMAND LIST FILTERBY FOO x
COMMAND GETKEYS SET a b
COMMAND GETKEYS MSET a 1 b 2
COMMAND GETKEYS ZUNIONSTORE d 2 a b
COMMAND GETKEYS BLPOP a b 0
COMMAND GETKEYS PING x
COMMAND GETKEYS NOSUCH a
COMMAND GETKEYS GET
CLIENT NO-EVICT on
CLIENT NO-EVICT maybe
CLIENT KILL 1.2.3.4:5
CLIENT KILL ID 999999
CLIENT KILL ID abc
CLIENT KILL FOO bar
CLIENT KILL ID
FLUSHDB FOO
FLUSHDB
DBSIZE
RANDOMKEY
GET k
SCAN abc
SCAN 0 COUNT 0
SCAN 0 FOO bar
"#;

/// The collection types. Replies listing a hash's or a set's elements are
/// compared as multisets ([`unordered`]): Redis leaves their order
/// unspecified (redis-server replies with small collections in insertion
/// order, this server in name hash order, `docs/format/server-keyspace.md`).
const TYPES_SCRIPT: &str = r#"
FLUSHALL
HSET h a 1 b 2
HSET h b 3 c 4
HSET h a
HSET h a 1 b
HGET h a
HGET h zz
HGET nohash a
HMGET h a zz c
HMSET h d 5
HLEN h
HLEN nohash
HEXISTS h a
HEXISTS h zz
HSTRLEN h a
HSTRLEN h zz
HGETALL h
HGETALL nohash
HKEYS h
HVALS h
HSETNX h a 9
HSETNX h e 9
HINCRBY h a 10
HINCRBY h a abc
HINCRBY h new 5
HINCRBY h zz 1
HSET h s str
HINCRBY h s 1
HINCRBYFLOAT h s 1
HSET h big 9223372036854775807
HINCRBY h big 1
HINCRBYFLOAT h f 1.5
HINCRBYFLOAT h f 2.25
HINCRBYFLOAT h f abc
HDEL h a zz
HDEL h a
HDEL nohash a
HSCAN h 0 MATCH b*
HSCAN h 0 COUNT 0
HSCAN nohash 0
HRANDFIELD nohash
HRANDFIELD nohash 3
HSET one f v
HRANDFIELD one
HRANDFIELD one 1
HRANDFIELD one 5 WITHVALUES
HRANDFIELD one -2
HRANDFIELD one 1 FOO
HRANDFIELD one abc
TYPE h
TYPE one
GET h
APPEND h x
INCR h
SET s v
HSET s a 1
HGET s a
HGETALL s
MGET s h
SET h v GET
SET h v NX
SET h v2 XX GET
GET h
HSET h2 a 1
EXPIRE h2 100
TTL h2
PERSIST h2
TTL h2
RENAME h2 h3
HGETALL h3
EXISTS h2 h3
DEL h3 one
EXISTS h3
HDEL s2 a
HSET e a 1
HDEL e a
EXISTS e
TYPE e
RPUSH l a b c
LPUSH l z y
RPUSHX nolist a
LPUSHX nolist a
LPUSHX l x
LLEN l
LLEN nolist
LRANGE l 0 -1
LRANGE l 1 2
LRANGE l -2 -1
LRANGE l 5 1
LRANGE l -100 100
LRANGE l a b
LRANGE nolist 0 -1
LINDEX l 0
LINDEX l -1
LINDEX l 100
LINDEX l abc
LSET l 0 X
LSET l 100 v
LSET nolist 0 v
LRANGE l 0 -1
LINSERT l BEFORE a ins
LINSERT l AFTER c ins2
LINSERT l AFTER nothere v
LINSERT l MIDDLE a v
LINSERT nolist BEFORE a v
LRANGE l 0 -1
RPUSH l a a
LREM l 1 a
LREM l -1 a
LREM l 0 zz
LRANGE l 0 -1
LPOS l ins
LPOS l a
LPOS l zz
LPOS l a RANK -1
LPOS l a COUNT 0
LPOS l a RANK 0
LPOS l a COUNT -1
LPOS l a MAXLEN 1
LPOS l a FOO 1
LPOP l
RPOP l
LPOP l 2
RPOP l 0
LPOP l -1
LPOP nolist
LPOP nolist 2
LTRIM l 1 2
LRANGE l 0 -1
LTRIM l 5 10
EXISTS l
RPUSH src 1 2 3
LMOVE src dst LEFT RIGHT
LMOVE src dst RIGHT LEFT
LMOVE src dst UP LEFT
LMOVE nolist dst LEFT LEFT
RPOPLPUSH src dst
LRANGE dst 0 -1
EXISTS src
RPOPLPUSH dst dst
LRANGE dst 0 -1
LPUSH h x
LRANGE h 0 -1
BLPOP dst 0
BRPOP dst nolist 0
BLPOP dst abc
BLPOP dst -1
TYPE dst
MULTI
BLPOP nolist 1
BLMOVE nolist dst LEFT LEFT 1
EXEC
SADD s1 1 2 3
SADD sa a
SMEMBERS sa
SADD s1 1 4
SADD s1
SREM s1 4 99
SREM noset 1
SCARD s1
SCARD noset
SISMEMBER s1 1
SISMEMBER s1 99
SMISMEMBER s1 1 99 2
SMEMBERS s1
SMEMBERS noset
SADD s2 2 3 4
SINTER s1 s2
SUNION s1 s2
SDIFF s1 s2
SINTER s1 noset
SINTERSTORE s3 s1 s2
SMEMBERS s3
SUNIONSTORE s3 s1 s2
SMEMBERS s3
SDIFFSTORE s3 s1 s2
SMEMBERS s3
SDIFFSTORE s3 s1 s1
EXISTS s3
SINTERCARD 2 s1 s2
SINTERCARD 2 s1 s2 LIMIT 1
SINTERCARD 0 s1
SINTERCARD 3 s1 s2
SINTERCARD 2 s1 s2 LIMIT -1
SMOVE s1 s2 1
SMOVE s1 s2 99
SMOVE noset s2 1
SMEMBERS s1
SMEMBERS s2
SSCAN s2 0
SSCAN s2 0 MATCH 3*
SPOP noset
SPOP noset 3
SPOP s1 -1
SADD one1 x
SPOP one1
EXISTS one1
SADD one1 x
SRANDMEMBER one1
SRANDMEMBER one1 3
SRANDMEMBER one1 -2
SRANDMEMBER noset
SRANDMEMBER noset 3
SRANDMEMBER one1 -9223372036854775808
HRANDFIELD one -9223372036854775808
SPOP one1 5
ZADD z 1 a 2 b 3 c
ZADD z 1.5 a 4 d
ZADD z NX 9 a 5 e
ZADD z XX 9 a 9 zz
ZADD z CH 10 a 11 f
ZADD z GT 1 b
ZADD z LT 1 b
ZADD z GT CH 100 b
ZADD z INCR 1 c
ZADD z INCR NX 1 c
ZADD z INCR 1 c 2 d
ZADD z NX XX 1 a
ZADD z GT LT 1 a
ZADD z NX GT 1 a
ZADD z 1
ZADD z abc a
ZADD z nan a
ZADD noz XX 1 a
ZADD noz XX INCR 1 a
EXISTS noz
ZADD z 1.1 g -2.5 h inf i -inf j
ZCARD z
ZCARD noz
ZSCORE z a
ZSCORE z g
ZSCORE z i
ZSCORE z zz
ZSCORE noz a
ZMSCORE z a zz h
ZINCRBY z 2.5 a
ZINCRBY z 1 newm
ZINCRBY z abc a
ZRANGE z 0 -1
ZRANGE z 0 -1 WITHSCORES
ZRANGE z 2 4 WITHSCORES
ZRANGE z -3 -1
ZRANGE z 0 -1 REV
ZREVRANGE z 0 2 WITHSCORES
ZRANGE z 5 1
ZRANGE z 0 10 LIMIT 0 1
ZRANGE z (1 5 BYSCORE
ZRANGE z -inf +inf BYSCORE WITHSCORES
ZRANGE z 5 (1 BYSCORE REV
ZRANGE z 1 10 BYSCORE LIMIT 1 2
ZRANGE z 1 10 BYSCORE LIMIT 1 -1
ZRANGE z 1 10 BYSCORE LIMIT -1 2
ZRANGE z x 10 BYSCORE
ZRANGEBYSCORE z 1 5
ZRANGEBYSCORE z (1 (5 WITHSCORES
ZREVRANGEBYSCORE z 5 1 WITHSCORES LIMIT 0 2
ZRANGE z 0 -1 BYLEX
ZRANGE z [a (c BYLEX
ZRANGE z a c BYLEX
ZRANGE z - + BYLEX WITHSCORES
ZCOUNT z 1 5
ZCOUNT z (1 +inf
ZCOUNT z a b
ZRANK z a
ZRANK z zz
ZREVRANK z a
ZRANK noz a
ZADD lex 0 a 0 b 0 c 0 d 0 e
ZRANGEBYLEX lex - +
ZRANGEBYLEX lex [b (d
ZREVRANGEBYLEX lex (d [b
ZRANGEBYLEX lex - + LIMIT 1 2
ZRANGEBYLEX lex - + LIMIT 0 0
ZRANGE lex -inf +inf BYSCORE LIMIT 0 0
ZINTERCARD 2 lex lex
ZINTERCARD 2 lex nolex
ZINTERCARD 1 lex LIMIT 2
ZINTERCARD 0 lex
ZLEXCOUNT lex [b +
ZREMRANGEBYLEX lex [a [b
ZRANGE lex 0 -1
ZPOPMIN z
ZPOPMAX z
ZPOPMIN z 2
ZPOPMAX z 0
ZPOPMIN z -1
ZPOPMIN noz
ZPOPMIN noz 2
ZREM z a zz
ZREM noz a
ZRANGE z 0 -1 WITHSCORES
ZREMRANGEBYSCORE z 3 4
ZREMRANGEBYRANK z 0 0
ZRANGE z 0 -1 WITHSCORES
ZADD z1 1 a 2 b 3 c
ZADD z2 10 b 20 c 30 d
ZUNIONSTORE out 2 z1 z2
ZRANGE out 0 -1 WITHSCORES
ZUNIONSTORE out 2 z1 z2 WEIGHTS 2 1 AGGREGATE MAX
ZRANGE out 0 -1 WITHSCORES
ZINTERSTORE out 2 z1 z2 AGGREGATE MIN
ZRANGE out 0 -1 WITHSCORES
ZINTERSTORE out 2 z1 z2 WEIGHTS 1
ZUNIONSTORE out 0 z1
ZDIFFSTORE out 2 z1 z2
ZRANGE out 0 -1 WITHSCORES
SADD sz a x
ZUNIONSTORE out 2 z1 sz
ZRANGE out 0 -1 WITHSCORES
ZUNION 2 z1 z2 WITHSCORES
ZINTER 2 z1 z2
ZDIFF 2 z1 z2 WITHSCORES
ZRANGESTORE out z1 0 1
ZRANGE out 0 -1
ZRANGESTORE out z1 (1 +inf BYSCORE
ZRANGE out 0 -1
ZINTERSTORE out 2 z1 noz
EXISTS out
ZSCAN z1 0
BZPOPMIN z1 0
BZPOPMAX z1 noz 0
BZPOPMIN z1 abc
MULTI
BZPOPMIN noz 1
EXEC
ZADD h 1 a
ZSCORE l a
SET str v
COPY str str2
GET str2
COPY str str2
COPY str str2 REPLACE
COPY str str
COPY str str3 DB 0
COPY str str3 FOO
COPY nokey x
RPUSH cl a b c
EXPIRE cl 1000
COPY cl cl2
LRANGE cl2 0 -1
TTL cl2
ZADD cz 1 a 2 b
COPY cz cz2
ZRANGE cz2 0 -1 WITHSCORES
HSET ch a 1
COPY ch ch2
HGETALL ch2
TOUCH str cl nokey
EXPIRETIME nokey
EXPIRETIME str
PEXPIRETIME nokey
PEXPIREAT str 4102444800000
EXPIRETIME str
PEXPIRETIME str
OBJECT ENCODING str
SET num 123
OBJECT ENCODING num
SET long xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
OBJECT ENCODING long
OBJECT ENCODING cl
OBJECT ENCODING cz
OBJECT ENCODING ch
SADD is 1 2 3
OBJECT ENCODING is
SADD hs a
OBJECT ENCODING hs
OBJECT ENCODING nokey
OBJECT FREQ str
OBJECT REFCOUNT nokey
OBJECT FOO str
OBJECT ENCODING
TYPE cl
TYPE cz
TYPE ch
TYPE is
SCAN 0 TYPE list COUNT 1000 MATCH cl2
UNLINK cl cz nokey
SETBIT bm 7 1
SETBIT bm 7 0
SETBIT bm 100 1
SETBIT bm -1 1
SETBIT bm 4294967296 1
SETBIT bm 1 2
GETBIT bm 100
GETBIT bm 7
GETBIT bm 100000
GETBIT nobm 1
GETBIT bm abc
STRLEN bm
SET bs foobar
BITCOUNT bs
BITCOUNT bs 0 0
BITCOUNT bs 1 1
BITCOUNT bs 1 -1
BITCOUNT bs -2 -1
BITCOUNT bs -1 -2
BITCOUNT bs 5 30 BIT
BITCOUNT bs 0 -1 BYTE
BITCOUNT bs 0
BITCOUNT bs 0 1 FOO
BITCOUNT nobm
SET bp "\xff\xf0\x00"
BITPOS bp 0
BITPOS bp 1
BITPOS bp 0 2 -1
BITPOS bp 1 2 -1
BITPOS bp 0 7 15 BIT
BITPOS bp 2
BITPOS nobm 1
BITPOS nobm 0
SET ones "\xff\xff"
BITPOS ones 0
BITPOS ones 0 0 -1
SET b1 abc
SET b2 "\x01\x02"
BITOP AND bdst b1 b2
GET bdst
BITOP OR bdst b1 b2
GET bdst
BITOP XOR bdst b1 b2 nobm
GET bdst
BITOP NOT bdst b1
GET bdst
BITOP NOT bdst b1 b2
BITOP FOO bdst b1
BITOP AND bdst nobm
EXISTS bdst
SETBIT h 1 1
BITCOUNT l
SADD h x
SMEMBERS l
SINTER s2 h
HSET wh a 1
WATCH wh
HSET wh a 2
MULTI
PING
EXEC
WATCH wh
HINCRBY wh a 1
MULTI
PING
EXEC
RPUSH wl a
WATCH wl
LSET wl 0 b
MULTI
PING
EXEC
WATCH wl
SADD wl x
MULTI
PING
EXEC
PUBLISH ch hello
PUBSUB NUMSUB ch
PUBSUB NUMPAT
PUBSUB CHANNELS
PUBSUB FOO
SUBSCRIBE ch
PSUBSCRIBE c*
GET k
PING
PING x
PUBSUB NUMSUB ch
UNSUBSCRIBE nosuch
PUNSUBSCRIBE c*
UNSUBSCRIBE
UNSUBSCRIBE
PUNSUBSCRIBE
GET k
"#;

/// LMPOP/ZMPOP and their blocking forms, BITFIELD, LCS and SORT.
const MPOP_BITS_SORT_SCRIPT: &str = r#"
FLUSHALL
RPUSH ml1 a b c d e
RPUSH ml2 x
LMPOP 2 nol ml1 LEFT
LMPOP 2 nol ml1 RIGHT COUNT 2
LMPOP 1 ml1 LEFT COUNT 10
EXISTS ml1
LMPOP 2 ml1 ml2 RIGHT
LMPOP 2 ml1 ml2 RIGHT
LMPOP 0 ml1 LEFT
LMPOP -1 ml1 LEFT
LMPOP abc ml1 LEFT
LMPOP 5 ml1 LEFT
LMPOP 1 ml1 MIDDLE
LMPOP 1 ml1 LEFT COUNT 0
LMPOP 1 ml1 LEFT COUNT -1
LMPOP 1 ml1 LEFT COUNT abc
LMPOP 1 ml1 LEFT COUNT 1 COUNT 2
LMPOP 1 ml1 LEFT FOO
LMPOP 1 ml1 LEFT COUNT
SET mstr v
LMPOP 2 nol mstr LEFT
RPUSH ml3 p q
LMPOP 2 ml3 mstr LEFT
BLMPOP 0.01 2 nol1 nol2 LEFT
RPUSH ml4 1 2 3
BLMPOP 0 2 nol ml4 RIGHT COUNT 2
BLMPOP 0 1 ml4 LEFT COUNT 5
BLMPOP -1 1 ml4 LEFT
BLMPOP abc 1 ml4 LEFT
BLMPOP 0 0 ml4 LEFT
BLMPOP 0 1 mstr LEFT
LMOVE nol mstr LEFT LEFT
RPOPLPUSH nol mstr
RPUSH mlsrc z
LMOVE mlsrc mstr LEFT LEFT
LRANGE mlsrc 0 -1
MULTI
BLMPOP 0 1 nol LEFT
EXEC
ZADD mz1 1 a 2 b 3 c 4 d
ZADD mz2 5 x
ZMPOP 2 noz mz1 MIN
ZMPOP 1 mz1 MAX COUNT 2
ZMPOP 2 mz1 mz2 MAX COUNT 10
ZMPOP 2 mz1 mz2 MIN
ZMPOP 1 mz1 MIN
ZMPOP 0 mz1 MIN
ZMPOP 1 mz1 LEFT
ZMPOP 1 mz1 MIN COUNT 0
ZMPOP 3 mz1 MIN
ZMPOP 2 noz mstr MIN
ZADD mz3 1.5 a -inf b
BZMPOP 0 2 noz mz3 MIN COUNT 5
BZMPOP 0.01 1 noz MAX
BZMPOP -1 1 noz MAX
BZMPOP 0 1 mstr MAX
COMMAND GETKEYS LMPOP 2 k1 k2 LEFT
COMMAND GETKEYS BLMPOP 0 2 k1 k2 LEFT COUNT 1
COMMAND GETKEYS ZMPOP 1 k1 MIN
COMMAND GETKEYS BZMPOP 1 3 k1 k2 k3 MAX
BITFIELD bf SET i8 0 100 GET i8 0
BITFIELD bf INCRBY i8 0 100 INCRBY i8 0 -300
BITFIELD bf OVERFLOW SAT INCRBY i8 0 1000 INCRBY i8 0 -1000
BITFIELD bf OVERFLOW FAIL INCRBY i8 0 1000 GET i8 0
BITFIELD bf SET u4 #2 15 GET u4 #2 GET u4 8 GET i4 8
BITFIELD bf OVERFLOW WRAP INCRBY u2 100 7 GET u2 100
BITFIELD bf OVERFLOW SAT SET u3 0 100 SET i3 3 -100
BITFIELD bf SET i64 64 -1 GET i64 64 GET u63 64 INCRBY i64 64 1
BITFIELD bf SET i64 128 9223372036854775807 INCRBY i64 128 1 OVERFLOW SAT INCRBY i64 128 1
BITFIELD bf SET u63 200 -1 GET u63 200
GET bf
BITFIELD bf GET u64 0
BITFIELD bf GET i65 0
BITFIELD bf GET x8 0
BITFIELD bf GET u8 -1
BITFIELD bf GET u8 abc
BITFIELD bf SET u8 0 abc
BITFIELD bf OVERFLOW FOO
BITFIELD bf FOO u8 0
BITFIELD bf GET u8
BITFIELD bf
BITFIELD nobf GET u8 0
EXISTS nobf
BITFIELD nobf2 OVERFLOW FAIL INCRBY u2 0 10
GET nobf2
BITFIELD_RO bf GET u8 0 GET i16 4
BITFIELD_RO bf SET u8 0 1
BITFIELD_RO nobf GET u8 0
BITFIELD ml3 GET u8 0
BITFIELD_RO ml3 GET u8 0
SET emptybp ""
BITPOS emptybp 1
BITPOS emptybp 0
BITPOS emptybp 0 0 -1
BITCOUNT emptybp
SET lcs1 ohmytext
SET lcs2 mynewtext
LCS lcs1 lcs2
LCS lcs1 lcs2 LEN
LCS lcs1 lcs2 IDX
LCS lcs1 lcs2 IDX MINMATCHLEN 4
LCS lcs1 lcs2 IDX WITHMATCHLEN
LCS lcs1 lcs2 IDX MINMATCHLEN 4 WITHMATCHLEN
LCS lcs1 lcs2 IDX MINMATCHLEN -3
LCS lcs1 lcs2 LEN IDX
LCS lcs1 lcs2 FOO
LCS lcs1 lcs2 MINMATCHLEN abc
LCS lcs1 nolcs
LCS nolcs nolcs2 IDX
LCS lcs1 ml3
LCS lcs1
SET lcs3 "ACCGGTCGAGTGCGCGGAAGCCGGCCGAA"
SET lcs4 "GTCGTTCGGAATGCCGTTGCTCTGTAAA"
LCS lcs3 lcs4
LCS lcs3 lcs4 IDX WITHMATCHLEN
RPUSH sl 3 1 2 10 -5 1.5
SORT sl
SORT sl DESC
SORT sl ALPHA
SORT sl ALPHA DESC LIMIT 1 3
SORT sl LIMIT 2 100
SORT sl LIMIT -1 2
SORT sl LIMIT 10 2
SORT sl LIMIT 0 0
SORT sl LIMIT 0 -1
SORT sl LIMIT a 1
SORT sl LIMIT 1
SORT sl FOO
SORT sl BY nosort
SORT sl BY nosort DESC LIMIT 1 2
RPUSH sw a b c
SORT sw
SORT sw ALPHA
SADD ss 5 3 9 1
SORT ss
SORT ss DESC LIMIT 0 2
SORT ss BY nosort STORE sdst
LRANGE sdst 0 -1
ZADD sz 1 c 2 a 3 b
SORT sz ALPHA
SORT sz BY nosort
SORT sz BY nosort DESC
SORT sz BY nosort LIMIT 1 5
MSET w_3 30 w_1 10 w_2 20 w_10 5 w_-5 0 w_1.5 15
SORT sl BY w_*
SORT sl BY w_* DESC GET # GET w_*
SORT sl BY w_* GET nokey_* GET #
HSET o_1 name one rank 3
HSET o_2 name two rank 1
HSET o_3 name three rank 2
RPUSH ol 1 2 3
SORT ol BY o_*->rank GET o_*->name
SORT ol BY o_*->rank DESC GET o_*->name GET o_*->missing
SORT ol BY o_*->name ALPHA GET #
SORT ol GET noglob
SORT ol BY w_* STORE odst
LRANGE odst 0 -1
SORT ol BY o_*->rank GET o_*->name GET nokey_* STORE odst
LRANGE odst 0 -1
SORT nosort STORE odst
EXISTS odst
SORT nosort
SORT mstr
HSET sh a 1
SORT sh
SORT_RO sl
SORT_RO sl STORE x
SORT_RO sl BY w_* GET w_*
COMMAND GETKEYS SORT sl STORE a LIMIT 0 1 STORE b
COMMAND GETKEYS SORT_RO sl BY x
ZADD zr1 7 only
ZRANDMEMBER zr1
ZRANDMEMBER zr1 1 WITHSCORES
ZRANDMEMBER zr1 5
ZRANDMEMBER zr1 -2 WITHSCORES
ZRANDMEMBER zr1 0
ZRANDMEMBER nozr
ZRANDMEMBER nozr 3
ZRANDMEMBER zr1 abc
ZRANDMEMBER zr1 1 FOO
ZRANDMEMBER zr1 1 WITHSCORES x
ZRANDMEMBER zr1 -9223372036854775808
ZRANDMEMBER zr1 9223372036854775807 WITHSCORES
ZRANDMEMBER mstr
CLIENT KILL USER nobody
CLIENT UNBLOCK abc
CLIENT UNBLOCK 999999 FOO
CLIENT UNBLOCK abc FOO
CLIENT UNBLOCK 999999
CLIENT REPLY FOO
DUMP missing
HINCRBYFLOAT hnan f +inf
EXISTS hnan
SET dk v
RESTORE dk 0 garbage
RESTORE dk2 0 garbage
RESTORE dk2 0 x
RESTORE dk2 0 ""
RESTORE dk2 -1 garbage
RESTORE dk2 abc garbage
RESTORE dk2 0 garbage FOO
RESTORE dk2 0 garbage IDLETIME -1
RESTORE dk2 0 garbage FREQ 256
CONFIG SET maxmemory 0 maxmemory 0
CONFIG SET daemonize yes
RESTORE dk2 0 garbage IDLETIME 1 FREQ 1
RESTORE dk2 0 garbage REPLACE ABSTTL IDLETIME 10
EXISTS dk2
"#;

/// Commands run after `HELLO 3`: RESP3 replies.
const RESP3_SCRIPT: &str = r#"
ZADD zr 1 a 2.5 b
ZRANGE zr 0 -1 WITHSCORES
ZSCORE zr b
ZPOPMIN zr
ZADD zr 1 a
ZPOPMIN zr 2
ZADD zr 1 a 2 b
BZPOPMAX zr 0
ZINCRBY zr 1 a
HSET h3 a 1 b 2
HGETALL h3
HRANDFIELD h3 5 WITHVALUES
SET k v
GET k
GET missing
MGET k missing
INCRBYFLOAT f 1.25
ZADD zr3 1 a 2.5 b 3 c
ZMPOP 1 zr3 MIN COUNT 2
BZMPOP 0 1 zr3 MAX
ZMPOP 1 zr3 MIN
RPUSH lr3 a b
LMPOP 1 lr3 LEFT COUNT 5
LMPOP 1 lr3 LEFT
SET lr3s ohmytext
SET lr3t mynewtext
LCS lr3s lr3t IDX WITHMATCHLEN
ZADD zr4 2.5 m
ZRANDMEMBER zr4 1 WITHSCORES
ZRANDMEMBER zr4 -2 WITHSCORES
MULTI
GET missing
EXEC
WATCH k
SET k w
MULTI
GET k
EXEC
"#;

/// [`redis_server`], or `None` with a note outside CI: in CI (which
/// installs it) a missing redis-server fails the test.
fn redis_server_or_skip() -> Option<(Child, std::net::SocketAddr)> {
    let started = redis_server();
    if started.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is not installed; .ci/run installs it (apt-get install redis-server)"
        );
        eprintln!("redis-server not found: the differential test checked nothing");
    }
    started
}

fn redis_server() -> Option<(Child, std::net::SocketAddr)> {
    // A port found free may be taken again before redis-server binds it
    // (the other test here starts one too): redis-server then exits, and
    // a connect reaches the other holder. So the child must still run once
    // a connect succeeds; if it exited, another port is tried.
    for _ in 0..5 {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
            l.local_addr().ok()?.port()
        };
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                // `DEBUG SET-ACTIVE-EXPIRE` (the notification test).
                "--enable-debug-command",
                "local",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if child.try_wait().ok()?.is_some() {
                break;
            }
            if let Ok(conn) = TcpStream::connect(addr) {
                if serves_as(conn, child.id()) {
                    return Some((child, addr));
                }
                // Another process's listener.
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("redis-server exited at start five times (ports taken?)")
}

/// Whether the redis-server answering on `conn` is the process `pid`
/// (`INFO server`'s `process_id`).
fn serves_as(mut conn: TcpStream, pid: u32) -> bool {
    use std::io::{Read, Write};
    let want = format!("process_id:{pid}\r\n");
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    if conn.write_all(b"INFO server\r\n").is_err() {
        return false;
    }
    let (mut got, mut chunk) = (Vec::new(), [0u8; 4096]);
    while !String::from_utf8_lossy(&got).contains("process_id:") || !got.ends_with(b"\r\n") {
        match conn.read(&mut chunk) {
            Ok(n) if n > 0 => got.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
    String::from_utf8_lossy(&got).contains(&want)
}

/// For a command whose reply lists a hash's or a set's elements, in an
/// order Redis leaves unspecified: how many items make one element (2 for
/// field-value pairs in a flat array), and whether the list is a scan's
/// (the second item of its reply).
fn unordered(args: &[&[u8]]) -> Option<(usize, bool)> {
    let name = String::from_utf8_lossy(args[0]).to_ascii_uppercase();
    let with_values = args.len() == 4 && args[3].eq_ignore_ascii_case(b"withvalues");
    Some(match name.as_str() {
        "HSCAN" | "ZSCAN" => (2, true),
        "SSCAN" => (1, true),
        "HGETALL" => (2, false),
        "HRANDFIELD" if with_values => (2, false),
        "SMEMBERS" | "HKEYS" | "HVALS" | "SRANDMEMBER" | "SPOP" | "HRANDFIELD" => (1, false),
        _ => return None,
    })
}

/// One RESP item: its bytes, and for an aggregate its header line and
/// items.
struct Item<'a> {
    raw: &'a [u8],
    header: &'a [u8],
    items: Vec<Item<'a>>,
}

fn parse_item(b: &[u8]) -> Item<'_> {
    let line_end = b.windows(2).position(|w| w == b"\r\n").expect("a line") + 2;
    let header = &b[..line_end];
    let n: i64 = std::str::from_utf8(&header[1..line_end - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1);
    let (mut at, mut items) = (line_end, Vec::new());
    match header[0] {
        b'$' | b'=' | b'!' if n >= 0 => at += n as usize + 2,
        b'*' | b'~' | b'>' | b'%' | b'|' if n > 0 => {
            let count = if matches!(header[0], b'%' | b'|') {
                2 * n
            } else {
                n
            };
            for _ in 0..count {
                let item = parse_item(&b[at..]);
                at += item.raw.len();
                items.push(item);
            }
        }
        _ => {}
    }
    Item {
        raw: &b[..at],
        header,
        items,
    }
}

/// `reply` with the elements of its list (with `is_scan`, its second
/// item) sorted, `group` items an element.
fn sorted_reply(reply: &[u8], (group, is_scan): (usize, bool)) -> Vec<u8> {
    let top = parse_item(reply);
    let is_scan = is_scan && top.items.len() == 2;
    let list = if is_scan { &top.items[1] } else { &top };
    // RESP3 nests each field-value pair in an array of its own.
    let nested = list.items.first().is_some_and(|i| i.header[0] == b'*');
    let group = if nested { 1 } else { group };
    if list.items.is_empty() || list.items.len() % group != 0 {
        return reply.to_vec();
    }
    let mut elements: Vec<Vec<u8>> = list
        .items
        .chunks(group)
        .map(|c| c.iter().flat_map(|i| i.raw.to_vec()).collect())
        .collect();
    elements.sort();
    let mut out = Vec::new();
    if is_scan {
        out.extend_from_slice(top.header);
        out.extend_from_slice(top.items[0].raw);
    }
    out.extend_from_slice(list.header);
    out.extend(elements.concat());
    out
}

fn run(script: &str, ours: &mut Raw, theirs: &mut Raw, mismatches: &mut Vec<String>) {
    for line in script.lines().filter(|l| !l.trim().is_empty()) {
        let args = sluice_server::resp::split_args(line.as_bytes())
            .unwrap_or_else(|| panic!("script line {line:?} does not parse"));
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        ours.command(&args);
        theirs.command(&args);
        let (mut a, mut b) = (ours.reply(), theirs.reply());
        if let Some(group) = unordered(&args) {
            (a, b) = (sorted_reply(&a, group), sorted_reply(&b, group));
        }
        if a != b {
            mismatches.push(format!(
                "{line}\n  sluice: {:?}\n  redis:  {:?}",
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ));
        }
    }
}

#[test]
fn replies_match_redis_server_byte_for_byte() {
    let Some((mut child, addr)) = redis_server_or_skip() else {
        return;
    };
    let s = TestServer::start(|_| {});
    let mut ours = s.raw();
    let mut theirs = Raw::connect(addr);
    let mut mismatches = Vec::new();
    run(SCRIPT, &mut ours, &mut theirs, &mut mismatches);
    run(TYPES_SCRIPT, &mut ours, &mut theirs, &mut mismatches);
    run(
        MPOP_BITS_SORT_SCRIPT,
        &mut ours,
        &mut theirs,
        &mut mismatches,
    );
    // RESP3: HELLO's reply differs by design (id, version); what follows
    // is compared.
    for r in [&mut ours, &mut theirs] {
        r.command(&[b"HELLO", b"3"]);
        r.reply();
    }
    run(RESP3_SCRIPT, &mut ours, &mut theirs, &mut mismatches);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        mismatches.is_empty(),
        "{} replies differ from redis-server:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// Keyspace notifications: the commands that change keys, on fresh keys,
/// with every class enabled (`new` included).
const NOTIFY_SCRIPT: &str = r#"
CONFIG SET notify-keyspace-events AKEn
SET nk v
SET nk v2 EX 100
SET nk v3 NX
SETNX nk2 a
GETSET nk2 b
MSET nk3 1 nk4 2
APPEND nk3 x
INCR nk4
INCRBYFLOAT nk4 1.5
SETRANGE nk3 0 ab
EXPIRE nk3 100
PERSIST nk3
RENAME nk3 nk5
DEL nk5 nk-missing
GETDEL nk4
GETDEL nk4
SETEX nk6 100 v
HSET nh a 1 b 2
HSETNX nh a 3
HINCRBY nh a 1
HINCRBYFLOAT nh b 0.5
HDEL nh x
HDEL nh a b
LPUSH nl a b c
RPUSH nl d
LPUSHX nl-missing a
LPOP nl
RPOP nl 2
LSET nl 0 z
LINSERT nl BEFORE z y
LREM nl 0 y
LREM nl 0 nothing
RPUSH nl q
LTRIM nl 0 0
RPOPLPUSH nl nl2
LMOVE nl2 nl3 LEFT RIGHT
SADD ns a b c
SADD ns a
SREM ns a x
SREM ns x
SMOVE ns ns2 b
SPOP ns
ZADD nz 1 a 2 b 3 c
ZADD nz XX 5 q
ZADD nz-missing XX 5 q
ZADD nz 1 a
ZINCRBY nz 1 a
ZREM nz a
ZPOPMIN nz
ZREMRANGEBYSCORE nz 0 10
SETBIT nb 7 1
SETBIT nb 7 1
BITOP OR nb2 nb
BITOP AND nb2 nb-missing
BITFIELD nb SET u8 0 255
SADD nsa a b
SADD nsb b c
SINTERSTORE nsi nsa nsb
SUNIONSTORE nsi nsa nsb
SDIFFSTORE nsd nsa nsb
SINTERSTORE nsi nsa ns-missing
SINTERSTORE nsi nsa ns-missing
SDIFFSTORE nsd nsa nsa
ZADD nza 1 a 2 b
ZADD nzb 3 b 4 c
ZUNIONSTORE nzu 2 nza nzb
ZINTERSTORE nzu 2 nza nzb
ZDIFFSTORE nzd 2 nza nzb
ZINTERSTORE nzu 2 nza nz-missing
ZRANGESTORE nzr nza 0 -1
ZRANGESTORE nzr nza 0 -1
ZRANGESTORE nzr nza 5 10
RPUSH nsrt 3 1 2
SORT nsrt STORE nsrt2
SORT nsrt STORE nsrt2
SORT nsrt-missing STORE nsrt2
COPY nza nzc
COPY nza nzc
COPY nsa nzc REPLACE
COPY nk nkc
DUMP-RESTORE nza nzx
DUMP-RESTORE nsa nzx
DUMP-RESTORE nk nkx
MULTI
SET nm 1
INCR nm
DEL nm
EXEC
"#;

/// `keymiss` from the lookups redis-server makes as reads, and `expired`
/// from lazy expiry: a command that finds a key past its expiry (the
/// reaper, and redis-server's active expiry, off; `SLEEP-MS` waits in the
/// test, past every `PX 50`; redis-server 7.0 reads its clock twice in
/// `PEXPIRE`, so a 1 ms expiry turns into `del` when a millisecond ticks
/// inside the command on a busy machine).
const MISS_EXPIRY_SCRIPT: &str = r#"
DEBUG SET-ACTIVE-EXPIRE 0
CONFIG SET notify-keyspace-events KEAm
GET m1
MGET m2 m3 m2
EXISTS m4 m4
TYPE m5
TTL m6
PTTL m6
EXPIRETIME m6
STRLEN m7
GETRANGE m8 0 1
HGET m9 f
HGETALL m9
HMGET m9 a b
LRANGE m10 0 -1
LINDEX m10 0
LLEN m10
SMEMBERS m11
SISMEMBER m11 a
SCARD m11
ZSCORE m12 a
ZRANGE m12 0 -1
ZCARD m12
SINTER m13 m14
SUNION m13
SINTERCARD 1 m13
ZUNION 1 m15
ZINTERCARD 1 m15
TOUCH m16 m16b
DUMP m17
GETBIT m18 0
BITCOUNT m18
LCS m19 m20
OBJECT ENCODING m21
GETDEL m22
GETEX m23
GETSET m24 v
SET m25 v GET
SET m26 v NX
COPY m27 d27
SORT m28 STORE d28
RPUSH srt 2 1
SORT srt BY w_* GET g_*
ZRANGESTORE d29 m29 0 -1
BITOP OR d30 m30
SINTERSTORE d31 m31
SUNIONSTORE d31 m31 m31b
ZUNIONSTORE d32 1 m32
LPOP m35
INCR m36
DEL m37
EXPIRE m38 10
HSET h a 1
HGET h b
SET wt v
HGET wt a
LRANGE wt 0 1
MULTI
GET m39
DEL h
HGET h a
EXEC
SET e1 v PX 50
SET e2 v PX 50
SET e3 v PX 50
HSET e4 a b
PEXPIRE e4 50
RPUSH e5 a b
PEXPIRE e5 50
SET e6 v PX 50
SET e7 v PX 50
SET e8 1 PX 50
SET e9 v PX 50
SET e10 v PX 50
SET e11 v PX 50
SET e12 v PX 50
ZADD e13 1 a
PEXPIRE e13 50
SET e14 v PX 50
SET e15 v PX 50
SADD e16 a b
PEXPIRE e16 50
SET s1 v PX 50
SET s2 v PX 50
SET s3 v PX 50
SLEEP-MS 200
SCAN 0 MATCH s1 COUNT 1000
SCAN 0 MATCH s2 TYPE string COUNT 1000
SCAN 0 MATCH s2x COUNT 1000
KEYS s3
GET s3
GET e1
SET e2 v2
DEL e3
HGET e4 a
LPOP e5
EXISTS e6
TTL e7
INCR e8
MGET e9 e9
SET e10 v NX
GETDEL e11
MULTI
GET e12
SET e12 x
EXEC
ZADD e13 2 b
SUNIONSTORE e16d e16
CONFIG SET notify-keyspace-events KEA
GET e14
CONFIG SET notify-keyspace-events KEAn
SET e15 v
FLUSHALL
SET r1 v PX 50
SLEEP-MS 200
RANDOMKEY
DEBUG SET-ACTIVE-EXPIRE 1
CONFIG SET notify-keyspace-events KEAn
SELECT 7
SET d7 v
MOVE d7 8
SELECT 8
COPY d7 d7c DB 9
HSET d7h f v
COPY d7h d7c DB 9 REPLACE
SELECT 0
CONFIG SET notify-keyspace-events ""
PUBLISH notify-done x
"#;

/// Runs [`NOTIFY_SCRIPT`] and [`MISS_EXPIRY_SCRIPT`] on each server while another connection
/// subscribes to every channel, and compares what that subscriber gets.
#[test]
fn keyspace_notifications_match_redis_server() {
    let Some((mut child, addr)) = redis_server_or_skip() else {
        return;
    };
    let s = TestServer::start(|_| {});
    let mut seen = Vec::new();
    let mut numpat = Vec::new();
    let mut mismatches = Vec::new();
    for addr in [s.addr(), addr] {
        let mut sub = Raw::connect(addr);
        sub.command(&[b"PSUBSCRIBE", b"*"]);
        sub.reply();
        // A second client on the same pattern: `PUBSUB NUMPAT` counts
        // distinct patterns.
        let mut sub2 = Raw::connect(addr);
        sub2.command(&[b"PSUBSCRIBE", b"*", b"k*"]);
        sub2.reply();
        sub2.reply();
        let mut conn = Raw::connect(addr);
        conn.command(&[b"PUBSUB", b"NUMPAT"]);
        numpat.push(conn.reply());
        drop(sub2);
        let script = NOTIFY_SCRIPT.lines().chain(MISS_EXPIRY_SCRIPT.lines());
        for line in script.filter(|l| !l.trim().is_empty()) {
            let args = sluice_server::resp::split_args(line.as_bytes()).unwrap();
            let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            if args[0] == b"SLEEP-MS" {
                let ms = std::str::from_utf8(args[1]).unwrap().parse().unwrap();
                std::thread::sleep(Duration::from_millis(ms));
                continue;
            }
            if args[0] == b"DUMP-RESTORE" {
                // `RESTORE dst 0 <src's DUMP> REPLACE`, each server with
                // its own payload (the formats differ by design).
                conn.command(&[b"DUMP", args[1]]);
                let r = conn.reply();
                let start = r.iter().position(|&b| b == b'\n').expect("a bulk") + 1;
                let payload = &r[start..r.len() - 2];
                conn.command(&[b"RESTORE", args[2], b"0", payload, b"REPLACE"]);
                assert_eq!(conn.reply(), b"+OK\r\n", "{line}");
                continue;
            }
            conn.command(&args);
            conn.reply();
        }
        let mut messages = Vec::new();
        loop {
            let m = String::from_utf8_lossy(&sub.reply()).into_owned();
            if m.contains("notify-done") {
                break;
            }
            messages.push(m);
        }
        seen.push(messages);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(numpat[0], numpat[1], "PUBSUB NUMPAT");
    let (ours, theirs) = (&seen[0], &seen[1]);
    for i in 0..ours.len().max(theirs.len()) {
        if ours.get(i) != theirs.get(i) {
            mismatches.push(format!(
                "message {i}\n  sluice: {:?}\n  redis:  {:?}",
                ours.get(i),
                theirs.get(i)
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} keyspace notifications differ from redis-server's:\n{}",
        mismatches.len(),
        theirs.len(),
        mismatches.join("\n")
    );
}

/// `DUMP` then `RESTORE` on each server with its own payload (the payload
/// formats differ by design: `docs/format/dump-payload.md`): every reply
/// after the payload, and the payloads' rejection by the other server,
/// compared byte for byte.
#[test]
fn dump_and_restore_round_trip_as_on_redis_server() {
    let Some((mut child, addr)) = redis_server_or_skip() else {
        return;
    };
    let s = TestServer::start(|_| {});
    let mut ours = s.raw();
    let mut theirs = Raw::connect(addr);
    let setup = r#"
FLUSHALL
SET s hello
SET se v PX 100000
HSET h f1 v1 f2 ""
RPUSH l a b a c
SADD st x y z
ZADD z 1 a 2.5 b -inf c
"#;
    let mut mismatches = Vec::new();
    run(setup, &mut ours, &mut theirs, &mut mismatches);
    let mut payloads = Vec::new();
    for r in [&mut ours, &mut theirs] {
        let mut mine = Vec::new();
        for key in ["s", "se", "h", "l", "st", "z"] {
            r.command(&[b"DUMP", key.as_bytes()]);
            mine.push(bulk(&r.reply()));
        }
        payloads.push(mine);
    }
    let checks: &[&[&[u8]]] = &[
        &[b"GET", b"s2"],
        &[b"PTTL", b"se2"],
        &[b"HGETALL", b"h2"],
        &[b"LRANGE", b"l2", b"0", b"-1"],
        &[b"SCARD", b"st2"],
        &[b"SMISMEMBER", b"st2", b"x", b"y", b"z", b"w"],
        &[b"ZRANGE", b"z2", b"0", b"-1", b"WITHSCORES"],
        &[b"TYPE", b"z2"],
    ];
    for (side, r) in [&mut ours, &mut theirs].into_iter().enumerate() {
        let p = &payloads[side];
        let other = &payloads[1 - side];
        let mut replies = Vec::new();
        let keys = ["s2", "se2", "h2", "l2", "st2", "z2"];
        for (k, payload) in keys.iter().zip(p) {
            r.command(&[b"RESTORE", k.as_bytes(), b"0", payload]);
            replies.push(r.reply());
        }
        // Twice: BUSYKEY; with REPLACE and a TTL: OK.
        r.command(&[b"RESTORE", b"h2", b"0", &p[2]]);
        replies.push(r.reply());
        r.command(&[b"RESTORE", b"h2", b"100000", &p[2], b"REPLACE"]);
        replies.push(r.reply());
        r.command(&[b"TTL", b"h2"]);
        replies.push(r.reply());
        // An absolute TTL in the past writes nothing.
        r.command(&[b"RESTORE", b"gone", b"1", &p[0], b"ABSTTL"]);
        replies.push(r.reply());
        r.command(&[b"EXISTS", b"gone"]);
        replies.push(r.reply());
        // The other server's payload, and a damaged own one.
        r.command(&[b"RESTORE", b"x", b"0", &other[3]]);
        replies.push(r.reply());
        let mut damaged = p[3].clone();
        damaged[2] ^= 0x10;
        r.command(&[b"RESTORE", b"x", b"0", &damaged]);
        replies.push(r.reply());
        for c in checks {
            r.command(c);
            let reply = r.reply();
            replies.push(match unordered(c) {
                Some(group) => sorted_reply(&reply, group),
                None => reply,
            });
        }
        payloads.push(replies.into_iter().collect());
    }
    let (a, b) = (&payloads[2], &payloads[3]);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            mismatches.push(format!(
                "reply {i}\n  sluice: {:?}\n  redis:  {:?}",
                String::from_utf8_lossy(x),
                String::from_utf8_lossy(y)
            ));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// The payload of a bulk reply.
fn bulk(reply: &[u8]) -> Vec<u8> {
    let nl = reply
        .iter()
        .position(|&b| b == b'\n')
        .expect("a bulk reply");
    assert_eq!(reply[0], b'$', "not a bulk reply: {reply:?}");
    reply[nl + 1..reply.len() - 2].to_vec()
}
