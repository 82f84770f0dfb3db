# ragkv eval sweep; gnuplot 2026-11-23-sweep-musique20-smollm2.gp
set terminal svg size 1500,520 dynamic font 'sans,12' background rgb 'white'
set output '2026-11-23-sweep-musique20-smollm2.svg'
set datafile missing 'nan'
set grid
set key below font 'sans,10'
set multiplot layout 1,3 title '20 queries, baseline full: recovery of the damage reuse does, and agreement with full'
set xlabel 'real compute fraction (recomputed / reused token-layers)'
set ylabel 'recovery of first-token KL'
set yrange [-0.2:1.05]
plot '2026-11-23-sweep-musique20-smollm2.dat' index 0 using 2:4 with linespoints lc 1 pt 7 title 'blend/kv', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 1 using 2:4 with linespoints lc 2 pt 7 title 'blend/prophet', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 2 using 2:4 with linespoints lc 3 pt 7 title 'blend/random', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 3 using 2:4 with linespoints lc 4 pt 7 title 'reuse'
set ylabel 'recovery of first-token agreement'
plot '2026-11-23-sweep-musique20-smollm2.dat' index 0 using 2:5 with linespoints lc 1 pt 7 title 'blend/kv', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 1 using 2:5 with linespoints lc 2 pt 7 title 'blend/prophet', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 2 using 2:5 with linespoints lc 3 pt 7 title 'blend/random', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 3 using 2:5 with linespoints lc 4 pt 7 title 'reuse'
set xlabel 'TTFT / full'
set ylabel 'first-token agreement with full'
set yrange [*:1.02]
plot '2026-11-23-sweep-musique20-smollm2.dat' index 0 using 3:6 with linespoints lc 1 pt 7 title 'blend/kv', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 1 using 3:6 with linespoints lc 2 pt 7 title 'blend/prophet', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 2 using 3:6 with linespoints lc 3 pt 7 title 'blend/random', \
     '2026-11-23-sweep-musique20-smollm2.dat' index 3 using 3:6 with linespoints lc 4 pt 7 title 'reuse'
unset multiplot
