# attn-analyze plot; redraw with: cd docs/analysis && gnuplot selective.gp
set terminal svg size 1100,480 dynamic font 'Helvetica,11' noenhanced background rgb 'white'
set output 'selective.svg'
set datafile separator ','
set key autotitle columnhead
set grid
set key font ',9' samplen 2
set multiplot layout 1,2 title 'Selective attention''s pruning cache'
set logscale xy
set key top left
set xlabel 'memory saving (x)'
set ylabel 'largest relative error'
set title 'largest against attn_selective over the whole context'
plot 'selective_pruning.csv' using 8:($2 == 0 ? $3 : 1/0) with linespoints lc rgb '#1f77b4' title 'tau (no budget)', '' using 8:($2 == 0 ? $3 : 1/0):(sprintf('%s', strcol(1))) with labels offset 1,0.6 font ',8' notitle, 'selective_pruning.csv' using 8:($2 > 0 ? $3 : 1/0) with linespoints lc rgb '#d62728' title 'budget (tau inf)'
set logscale xy
set key top left
set xlabel 'memory saving (x)'
set ylabel 'mean relative error'
set title 'mean against attn_selective over the whole context'
plot 'selective_pruning.csv' using 8:($2 == 0 ? $4 : 1/0) with linespoints lc rgb '#1f77b4' title 'tau (no budget)', '' using 8:($2 == 0 ? $4 : 1/0):(sprintf('%s', strcol(1))) with labels offset 1,0.6 font ',8' notitle, 'selective_pruning.csv' using 8:($2 > 0 ? $4 : 1/0) with linespoints lc rgb '#d62728' title 'budget (tau inf)'
unset logscale
unset multiplot
