/*
 * verify.h -- ptrack_verify() (verify.cpp), the self-check that compares the
 * page LSNs on disk with what ptrack_get_pagemapset() lists; here only what
 * _PG_init needs from it.
 */
#ifndef PTRACK_PG_VERIFY_H
#define PTRACK_PG_VERIFY_H

namespace ptrack::pg {

/* Defines ptrack.verify_max_rate; in _PG_init. */
void define_verify_gucs();

}  // namespace ptrack::pg

#endif
